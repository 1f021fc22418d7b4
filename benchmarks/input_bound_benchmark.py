"""Does the accelerator wait on input? A real model step fed by our loader vs a cached batch.

    python -m benchmarks.input_bound_benchmark bench_data/out8k              # ResNet-50
    python -m benchmarks.input_bound_benchmark bench_data/out8k --model small --batch_size 64
    python -m benchmarks.input_bound_benchmark bench_data/out8k --service 2  # + tf.data service
    python -m benchmarks.input_bound_benchmark bench_data/out8k --dali        # + NVIDIA DALI
    python -m benchmarks.input_bound_benchmark bench_data/out8k --image_size 160  # a fast recipe
    python -m benchmarks.input_bound_benchmark bench_data/out8k --model efficientnetv2b0

For each way of feeding the model (float32 batches; uint8 batches into the same model with
`loaders.normalization_layer()` first; with --service, uint8 batches decoded by a tf.data
service: N workers started in this process on loopback, or a running one at grpc://host:port;
with --dali, uint8 batches decoded by `loaders.dali.load_dali_dataset`: nvJPEG on the GPU when
there is one, else DALI's CPU backend; its training pipeline, its evaluation pipeline, and a
row per --dali_row (other settings: `--dali_row hw_decoder_load=1`); for each, how long `fit`
waited for DALI's batches), three rates (images/s), each the median of alternating
`model.fit` runs after a warm-up that compiles the step:
  loader alone     load_dataset(training=True) into a consumer loop: what the input can supply
  fit, fed         model.fit fed by load_dataset(training=True)
  fit, cached      model.fit fed by one batch already decoded, repeated: the model's own speed
                   (the batch is still copied to the device every step, as ours is)
"fed / cached" near 1.0 means the model never waits on input; well below 1.0 means it is
input-bound by the loader's share of the host. On an accelerator (the Keras backend's own: JAX's
or PyTorch's GPUs, TensorFlow's with the TensorFlow backend) the model runs with mixed precision
(`mixed_bfloat16`) unless --no_mixed_precision; on a CPU-only host the model and the decoder
share the same cores, so the comparison says less (benchmarks.loader_benchmark covers that case).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf

from benchmarks.loader_benchmark import SIZE, fit_rates, images_per_second, small_cnn
from benchmarks.measure import built_dataset
from loaders import load_dataset, normalization_layer
from loaders.service import start_dispatcher, start_worker

# The backbones --model names (random weights, no classifier): ResNet-50, and the small models
# fast recipes train (issue 42), without their own input scaling (the loader's [0, 1] floats, or
# `normalization_layer()`'s, reach them as they reach ResNet-50).
BACKBONES = {
    "resnet50": lambda shape: keras.applications.ResNet50(
        weights=None, include_top=False, pooling="avg", input_shape=shape
    ),
    "efficientnetv2b0": lambda shape: keras.applications.EfficientNetV2B0(
        weights=None, include_top=False, pooling="avg", input_shape=shape,
        include_preprocessing=False,
    ),
    "mobilenetv3large": lambda shape: keras.applications.MobileNetV3Large(
        weights=None, include_top=False, pooling="avg", input_shape=shape,
        include_preprocessing=False,
    ),
}  # fmt: skip


def build_model(
    name: str, num_outputs: int, uint8: bool = False, size: tuple[int, int] = SIZE
) -> keras.Model:
    """A `BACKBONES` model (SGD with momentum) of `size` inputs, or loader_benchmark's small
    CNN; with `uint8`, it takes pixels and starts with `normalization_layer()`."""
    if name == "small":
        return small_cnn(num_outputs, uint8=uint8, size=size)
    inputs = keras.Input((*size, 3), dtype="uint8" if uint8 else "float32")
    x = normalization_layer()(inputs) if uint8 else inputs
    backbone = BACKBONES[name]((*size, 3))
    # A float32 softmax: under mixed precision the loss's inputs stay in full precision.
    outputs = keras.layers.Dense(num_outputs, activation="softmax", dtype="float32")(backbone(x))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        loss="categorical_crossentropy",
    )
    return model


def accelerators() -> list[str]:
    """The accelerators the Keras backend computes on. TensorFlow's list says nothing about
    them with the JAX or PyTorch backend (the GPU host's TensorFlow is a CPU build)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return [str(device) for device in jax.devices() if device.platform != "cpu"]
    if backend == "torch":
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return [gpu.name for gpu in tf.config.list_physical_devices("GPU")]


class Endless(keras.utils.PyDataset):
    """A `DaliDataset`'s stream without epochs (JAX and PyTorch backends), as `.repeat()`.

    It counts the time the training loop spends waiting for DALI's next batch: near zero while
    `fit` is slower than the cached batch means the GPU's time is shared (DALI's decoding and
    resizing run on the model's GPU), not that DALI delivers late."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches
        self.waited, self.taken = 0.0, 0

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index):
        start = time.perf_counter()
        batch = self.batches.next_batch()
        self.waited += time.perf_counter() - start
        self.taken += 1
        return batch


# load_dali_dataset's own arguments a --dali_row may set (any other name is a decoder option).
DALI_ARGUMENTS = ("device", "num_threads", "prefetch_batches")


def dali_row(text: str) -> tuple[str, dict]:
    """`--dali_row` "key=value,..." → (text, settings): numbers as numbers, the rest as text."""
    settings = {}
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE")
        key, value = key.strip(), value.strip()
        if key in settings:
            raise argparse.ArgumentTypeError(f"{key} given twice in {text!r}")
        if key == "handoff" and value not in ("loader", "plugin"):
            raise argparse.ArgumentTypeError(f"handoff must be loader or plugin, not {value!r}")
        if key == "training" and value not in ("0", "1"):
            raise argparse.ArgumentTypeError(f"training must be 0 or 1, not {value!r}")
        for kind in (int, float):
            try:
                settings[key] = kind(value)
                break
            except ValueError:
                pass
        else:
            settings[key] = value
    return text, settings


class PluginBatches:
    """A `DaliDataset`'s pipeline read through DALI's own JAX iterator
    (`nvidia.dali.plugin.jax.DALIGenericIterator`): does the loader's hand-over cost the
    model time? The same `next_batch()` as the loader's, for `Endless`."""

    def __init__(self, batches):
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.jax import DALIGenericIterator

        from loaders.dali_graph import READER

        self.iterator = DALIGenericIterator(
            [batches._pipeline],
            ["images", "labels"],
            reader_name=READER,
            auto_reset=True,
            last_batch_policy=LastBatchPolicy.DROP,
        )

    def next_batch(self):
        try:
            batch = next(self.iterator)
        except StopIteration:  # an epoch's end (auto_reset): the next one starts
            batch = next(self.iterator)
        return batch["images"], batch["labels"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir")
    parser.add_argument("--model", choices=(*BACKBONES, "small"), default="resnet50")
    parser.add_argument(
        "--image_size", type=int, default=SIZE[0], help="square input side (default 224)"
    )
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50, help="steps per timed run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no_mixed_precision", action="store_true")
    parser.add_argument(
        "--dali",
        action="store_true",
        help="also feed uint8 decoded by DALI: its training pipeline (random crop, flip), and its "
        "evaluation pipeline (whole image: no Python box step, no region decoding)",
    )
    parser.add_argument(
        "--dali_row",
        action="append",
        type=dali_row,
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE...]",
        help="with --dali, also a DALI row with these settings (repeatable): load_dali_dataset's "
        f"{', '.join(DALI_ARGUMENTS)}, training=0 for the evaluation pipeline, handoff=plugin "
        "for DALI's own JAX iterator instead of the loader's PyDataset, and any other name as a "
        "DALI decoder option (hw_decoder_load=1: every image to the GPU's hardware JPEG decoder)",
    )
    parser.add_argument(
        "--no_float32", action="store_true", help="leave out the float32 row (uint8 rows only)"
    )
    parser.add_argument(
        "--service",
        help="also feed uint8 through a tf.data service: N workers started here, or grpc://...",
    )
    args = parser.parse_args()
    if args.dali_row and not args.dali:
        parser.error("--dali_row adds DALI rows: give --dali too")

    devices = accelerators()
    mixed = bool(devices) and not args.no_mixed_precision
    if mixed:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    info = built_dataset(parser, args.data_dir)
    b, size = args.batch_size, (args.image_size, args.image_size)
    servers, service = [], args.service
    if service and not service.startswith("grpc://"):
        servers = [start_dispatcher()]
        servers += [start_worker(servers[0].target) for _ in range(int(service))]
        service = servers[0].target

    def feed(dtype: str, via: str | None = None, settings: dict | None = None):
        if via == "dali":
            from loaders.dali import load_dali_dataset

            settings = dict(settings or {})
            handoff = settings.pop("handoff", "loader")
            options = {key: settings.pop(key) for key in list(settings) if key in DALI_ARGUMENTS}
            training = bool(settings.pop("training", 1))
            batches = load_dali_dataset(
                args.data_dir, "train", batch_size=b, image_size=size, training=training,
                seed=0, dtype=dtype, decoder_options=settings, **options,
            )  # fmt: skip
            if isinstance(batches, tf.data.Dataset):
                if handoff == "plugin":
                    raise ValueError("handoff=plugin is DALI's JAX iterator: KERAS_BACKEND=jax")
                return batches.repeat()
            return Endless(PluginBatches(batches) if handoff == "plugin" else batches)
        return load_dataset(
            args.data_dir,
            "train",
            batch_size=b,
            image_size=size,
            training=True,
            seed=0,
            dtype=dtype,
            service=via,
        ).repeat()

    ways = {} if args.no_float32 else {"float32": ("float32", None)}
    ways["uint8 + normalization layer"] = ("uint8", None)
    if args.dali:
        ways["uint8, DALI"] = ("uint8", "dali")
        ways["uint8, DALI, evaluation pipeline"] = ("uint8", "dali", {"training": 0})
        for text, settings in args.dali_row:
            ways[f"uint8, DALI, {text}"] = ("uint8", "dali", settings)
    if service:
        ways["uint8, tf.data service"] = ("uint8", service)
    print(
        f"device: {', '.join(devices) or 'CPU only'}; host cores: {os.cpu_count()}; "
        f"Keras backend: {keras.backend.backend()}; "
        f"model: {args.model} at {size[0]}x{size[1]}, batch {b}, "
        f"mixed precision: {'on' if mixed else 'off'}"
        + (f"; tf.data service: {args.service}" if service else "")
    )
    print(
        f"| {args.model} {size[0]}px, batch {b} | loader alone | fit, fed | fit, cached | "
        "fed / cached |"
    )
    print("|---|---|---|---|---|")
    shares, models, waits, failed = {}, {}, {}, 0
    try:
        for name, (dtype, via, *options) in ways.items():
            # When each row starts, to line up with GPU samples (nvidia-smi dmon -o T)
            print(f"{time.strftime('%H:%M:%S')} {name}", file=sys.stderr, flush=True)
            try:
                fed = feed(dtype, via, *options)
                cached = tf.data.Dataset.from_tensors(next(iter(fed))).repeat()
                # One model per input dtype: the rows that feed it uint8 share its compiled step.
                if dtype not in models:
                    models[dtype] = build_model(
                        args.model, len(info.class_names), dtype == "uint8", size
                    )
                loader, _ = images_per_second(fed, args.steps, b, warmup=5)
                if isinstance(fed, Endless):
                    fed.waited, fed.taken = 0.0, 0
                fits = fit_rates(
                    models[dtype], {"fed": fed, "cached": cached}, args.steps, b, args.repeats
                )
            except Exception as error:  # noqa: BLE001 (the other rows still run; exit 1 says so)
                traceback.print_exc()
                models.pop(dtype, None)  # a step that failed can leave the model unusable
                print(f"| {name} | failed: {type(error).__name__}: {error} | | | |")
                failed += 1
                continue
            shares[name] = fits["fed"] / fits["cached"]
            print(
                f"| {name} | {loader:.0f} | {fits['fed']:.0f} | {fits['cached']:.0f} | "
                f"{shares[name]:.2f} |"
            )
            if isinstance(fed, Endless) and fed.taken:
                waits[name] = (1000 * fed.waited / fed.taken, 1000 * b / fits["fed"])
    finally:
        for server in servers:
            server._stop()
    print()
    for name, share in shares.items():
        verdict = "waits on input" if share < 0.95 else "does not wait on input"
        print(f"{name}: the model {verdict} (fed at {share:.2f} of its cached-batch speed)")
    for name, (waited, step) in waits.items():
        print(f"{name}: fit waited {waited:.1f} ms per batch for DALI (a fed step: {step:.1f} ms)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
