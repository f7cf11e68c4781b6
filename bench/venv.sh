#!/usr/bin/env bash
# Cold environment builds side by side: pip vs uv installing the same lock file on the same Python,
# each with an empty package cache (so both download everything), then the ratio.
#   bash bench/venv.sh [PYTHON]      (default: the Python `make venv` picks)
# Downloads the whole lock twice (several GB); takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-$(tools/find-python 3.13 3.12 || tools/find-python 3.11)}
lock=requirements/lock.txt
work=$(mktemp -d /tmp/odsd-bench-venv.XXXXXX)
trap 'rm -rf "$work"' EXIT
uv=${UV:-.tools/bin/uv}
[ -x "$uv" ] || { "$python" -m venv "$work/tools" && "$work/tools/bin/pip" install -q uv==0.13.8 && uv=$work/tools/bin/uv; }

seconds() { local t0=$SECONDS; "$@" >/dev/null 2>&1; echo $((SECONDS - t0)); }

pip_build() {
  "$python" -m venv "$work/pip-venv"
  "$work/pip-venv/bin/pip" install -q --no-cache-dir -r "$lock"
  "$work/pip-venv/bin/pip" install -q --no-cache-dir --no-deps -e .
}
uv_build() {
  UV_CACHE_DIR="$work/uv-cache" "$uv" venv -q --python "$python" "$work/uv-venv"
  UV_CACHE_DIR="$work/uv-cache" "$uv" pip sync -q --python "$work/uv-venv/bin/python" "$lock"
  UV_CACHE_DIR="$work/uv-cache" "$uv" pip install -q --python "$work/uv-venv/bin/python" --no-deps -e .
}

echo "python: $python ($("$python" -V)); lock: $lock ($(grep -c '==' "$lock") pins)"
t_uv=$(seconds uv_build)
echo "uv  cold build: ${t_uv} s ($(du -sh "$work/uv-venv" | cut -f1))"
rm -rf "$work/uv-venv" "$work/uv-cache"
t_pip=$(seconds pip_build)
echo "pip cold build: ${t_pip} s ($(du -sh "$work/pip-venv" | cut -f1))"
python3 -c "print(f'uv / pip: {max($t_uv, 1) / max($t_pip, 1):.2f}x the time')"
