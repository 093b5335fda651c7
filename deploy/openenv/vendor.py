"""Put what the image needs inside this folder, so that ``openenv build`` can build it from here alone.

OpenEnv builds an environment's image from a copy of its folder and nothing else (no path outside
it reaches the build). spyrl is not on a package index yet, so this script builds its wheel from the
checkout this folder belongs to and copies the version pins beside it::

    python deploy/openenv/vendor.py                          # writes deploy/openenv/wheels/
    openenv build deploy/openenv -t spyrl-env:latest         # the tag AutoEnv looks for

``wheels/`` is not committed; rerun this script after changing spyrl. Only the standard library and
pip are used.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def vendor(out: Path, root: Path = ROOT) -> Path:
    """Build spyrl's wheel from ``root`` into ``out/wheels`` (replacing any earlier one) with ``constraints.txt``;
    returns the wheel's path. Nothing is left half-written: the folder is filled aside, then renamed."""
    wheels = out / "wheels"
    staging = Path(tempfile.mkdtemp(prefix=".wheels-", dir=out))
    try:
        isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(staging), str(root)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip wheel {root} failed: {' '.join(done.stderr.strip().splitlines()[-1:])}")
        built = [p for p in staging.iterdir() if p.name.startswith("spyrl-") and p.suffix == ".whl"]
        if len(built) != 1:
            raise RuntimeError(f"expected one spyrl wheel from {root}, got {[p.name for p in built]}")
        shutil.copy2(root / "constraints.txt", staging / "constraints.txt")
        shutil.rmtree(wheels, ignore_errors=True)
        staging.rename(wheels)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return wheels / built[0].name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=HERE, help="the environment folder to write wheels/ into")
    args = p.parse_args(argv)
    if not (args.out / "openenv.yaml").is_file():
        print(f"error: {args.out} is not an OpenEnv environment folder (no openenv.yaml)", file=sys.stderr)
        return 2
    try:
        wheel = vendor(args.out)
    except (OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {wheel} and {wheel.parent / 'constraints.txt'}; next: openenv build {args.out} -t spyrl-env:latest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
