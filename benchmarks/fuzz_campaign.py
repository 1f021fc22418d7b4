"""A coverage-guided fuzzing campaign (Atheris, libFuzzer) over the parsers of untrusted bytes.

    pip install atheris==3.0.0        # not a dependency of the project: only campaigns need it
    python -m benchmarks.fuzz_campaign images --seconds 600
    python -m benchmarks.fuzz_campaign xml --seconds 600
    python -m benchmarks.fuzz_campaign records --seconds 600
    python -m benchmarks.fuzz_campaign metadata --seconds 600

Each target feeds libFuzzer's mutations of its seeds (the image seeds of `fuzz_targets`, the
corpus's images, the corpus's VOC XML, the records or the `build_info.json` of
`fuzz_records.seed_build`) through the build's parser or the readers of records or metadata,
instrumented for coverage, and checks the invariants of `benchmarks.fuzz_targets`
(`fuzz_records`, `fuzz_metadata`) on every input. A failing input is
written to `--artifacts` (crash-SHA1) and the campaign stops there: copy it into
tests/data/fuzz_cases/ (it becomes a regression test), fix, and run again. libFuzzer prints the
inputs tried ("Done N runs in S second(s)") and the coverage reached; RESULTS.md keeps them.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE.parent / "tests/data/corpus"


def _seed_folder(target: str, build: pathlib.Path | None = None) -> str:
    """A temp folder of seeds for `target` (libFuzzer adds what it finds to it)."""
    from benchmarks.fuzz_records import FOUND_RECORDS, seed_records
    from benchmarks.fuzz_targets import FOUND, SEEDS

    folder = tempfile.mkdtemp(prefix=f"fuzz-{target}-")
    if build is not None and target == "metadata":
        seeds = {"build_info.json": (build / "build_info.json").read_bytes()}
    elif build is not None:
        seeds = {
            f"{split}-{i}.pb": r
            for split, rs in seed_records(build).items()
            for i, r in enumerate(rs)
        }
        seeds.update({path.name: path.read_bytes() for path in FOUND_RECORDS.glob("*.pb")})
    elif target == "images":
        seeds = {f"{name}.bin": data for name, data in SEEDS.items()}
        for path in (*FOUND.glob("*.jpg"), *(CORPUS / "images/pillow").glob("*")):
            if path.stat().st_size <= 40_000:
                seeds[path.name] = path.read_bytes()
    else:
        seeds = {p.name: p.read_bytes() for p in CORPUS.rglob("*.xml")}
    for name, data in seeds.items():
        pathlib.Path(folder, name).write_bytes(data)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=("images", "xml", "records", "metadata"))
    parser.add_argument("--seconds", type=int, default=600, help="how long the campaign runs")
    parser.add_argument("--artifacts", default=".", help="where a failing input is written")
    args = parser.parse_args(argv)
    try:
        import atheris
    except ImportError:
        print("error: the campaign needs Atheris: pip install atheris==3.0.0", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    build = None
    if args.target in (
        "records",
        "metadata",
    ):  # built in another process: modules imported here before
        # `instrument_imports` would not be instrumented (libFuzzer then saw no coverage).
        build = pathlib.Path(tempfile.mkdtemp(prefix="fuzz-records-build-")) / "build"
        code = "import pathlib, sys; from benchmarks.fuzz_records import seed_build; "
        code += "seed_build(pathlib.Path(sys.argv[1]).parent)"
        subprocess.run([sys.executable, "-c", code, str(build)], check=True, cwd=HERE.parent)
    with atheris.instrument_imports(include=["beam_pipeline"]):
        from benchmarks.fuzz_metadata import build_copy, check_metadata_invariants
        from benchmarks.fuzz_records import check_record_invariants
        from benchmarks.fuzz_targets import (
            POLICIES,
            check_image_invariants,
            check_xml_invariants,
        )

    def one_image(data: bytes) -> None:
        check_image_invariants(data, POLICIES[len(data) % len(POLICIES)])

    def one_xml(data: bytes) -> None:
        size = 1 + len(data) % 4000
        check_xml_invariants(data, size, 1 + size // 2)

    def one_record(data: bytes) -> None:
        assert build is not None
        check_record_invariants(data, build, ("train", "validation")[len(data) % 2])

    def one_metadata(data: bytes) -> None:
        assert build is not None
        check_metadata_invariants(build_copy(build, build.parent / "edited", data))

    targets = {
        "images": one_image,
        "xml": one_xml,
        "records": one_record,
        "metadata": one_metadata,
    }
    seeds = _seed_folder(args.target, build)
    atheris.Setup(
        [
            sys.argv[0],
            f"-max_total_time={args.seconds}",
            f"-artifact_prefix={args.artifacts.rstrip('/')}/",
            "-max_len=65536",
            "-print_final_stats=1",
            seeds,
        ],
        targets[args.target],
    )
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
