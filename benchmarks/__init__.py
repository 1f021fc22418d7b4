"""Benchmarks of the builder and the loader against the baselines users would write instead.

Each script is a module of this package, run from the repository root (the package is not
installed: `setup.py` ships only `beam_pipeline`, `schemas` and `loaders`):

    python -m benchmarks.make_tree bench_data/tree2k --num_images 2000
    python -m benchmarks.make_tree bench_data/tree8k --num_images 8000
    python -m benchmarks.build_benchmark bench_data/tree2k bench_data/tree8k
    python -m beam_pipeline --input_dir bench_data/tree8k --output_dir bench_data/out8k \\
        --splits train --num_shards 16
    python -m benchmarks.loader_benchmark bench_data/out8k --tree bench_data/tree8k
    python -m benchmarks.profile_build bench_data/tree2k bench_data/tree8k
    python -m benchmarks.input_bound_benchmark bench_data/out8k

  make_tree              an ImageNet-like ILSVRC-DET tree of any size
  build_benchmark        build throughput and peak memory, ours against the baselines
  baselines              the builds a user would write instead (run by build_benchmark)
  profile_build          where a build's CPU time goes, by library (`perf`)
  loader_benchmark       loader throughput against the decode limit, and model.fit
  loader_baselines       the loaders a user would write instead (used by loader_benchmark)
  input_bound_benchmark  whether a model's training step waits on our loader
  measure                wall time and peak memory of a whole process tree

Results, and the commands that produced them, are in `benchmarks/RESULTS.md`; figures belong
there, not in these docstrings. `tests/test_benchmarks.py` runs every script on a tiny tree.
"""
