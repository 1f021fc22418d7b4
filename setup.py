"""Packaging for local installs and for Dataflow workers (`--setup_file ./setup.py`).

`install_requires` is what a Beam worker needs to run the builder; nothing is assumed to be on
the worker image besides Apache Beam itself. TensorFlow is only needed by the loader
(`pip install .[loader]`): the builder serialises `tf.train.Example` without it. `.[dask]`
adds Dask's distributed scheduler for `--runner DaskRunner`, `.[dataflow]` Beam's Google Cloud
I/O for `--runner DataflowRunner` and `gs://` paths.
"""

import pathlib
import re

import setuptools

HERE = pathlib.Path(__file__).parent
VERSION = re.search(
    r'__version__ = "([^"]+)"', (HERE / "beam_pipeline" / "__init__.py").read_text()
).group(1)

setuptools.setup(
    name="imagenet-tfrecords",
    version=VERSION,
    description="ImageNet-style image/annotation trees to sharded TFRecords with Apache Beam, "
    "and a tf.data loader for Keras",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=setuptools.find_packages(include=["beam_pipeline*", "schemas*", "loaders*"]),
    install_requires=[
        "apache-beam>=2.71,<3",
        "pillow>=10.3",
        "simplejpeg>=1.7",
        "lxml>=5.0",
        "numpy>=1.26",
        "google-crc32c>=1.5",
        "protobuf>=4.25",
        "rich>=13",
    ],
    extras_require={
        "loader": ["tensorflow>=2.16"],
        # Beam's DaskRunner needs dask >= 2024.4.2; `distributed` is the cluster it runs on.
        "dask": ["dask[distributed]>=2024.4.2"],
        # `show --histogram` plots the class counts; the contact sheet needs Pillow alone.
        "show": ["matplotlib>=3.8"],
        # loaders.dali: decoding on the GPU with NVIDIA DALI; pick the wheel of your CUDA major.
        # The loader itself needs TensorFlow (`import loaders`), so it comes along.
        # (DALI 2.4 is the version the tests and the GPU host ran.)
        "gpu": ["nvidia-dali-cuda120>=2.4", "tensorflow>=2.16"],
        "gpu-cuda13": ["nvidia-dali-cuda130>=2.4", "tensorflow>=2.16"],
        # --runner DataflowRunner and gs:// paths: Beam's Google Cloud I/O and the runner.
        "dataflow": ["apache-beam[gcp]>=2.71,<3"],
    },
    entry_points={
        "console_scripts": [
            "imagenet-tfrecords=beam_pipeline.tools.commands:run",
            "imagenet-tfrecords-sample=beam_pipeline.tools.sample_tree:main",
            "imagenet-tfrecords-verify=beam_pipeline.tools.verify:main",
        ]
    },
)
