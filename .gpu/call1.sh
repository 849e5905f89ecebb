#!/usr/bin/env bash
# C++ GPU suite, then the Python wheel and tests; logs under $OUT; a short table last.
set -u
mkdir -p "$OUT/cpp" "$OUT/py"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
s=$SECONDS; OUT="$OUT/cpp" timeout 200 bash gpu-bundle/gpu-run tests > "$OUT/cpp.log" 2>&1; cpp_rc=$?; cpp_s=$((SECONDS-s))
s=$SECONDS; OUT="$OUT/py" timeout 330 bash scripts/gpu-python wheel tests > "$OUT/py.log" 2>&1; py_rc=$?; py_s=$((SECONDS-s))
echo "== C++ (rc=$cpp_rc, ${cpp_s}s)"; tail -8 "$OUT/cpp.log"
echo "== Python (rc=$py_rc, ${py_s}s)"; grep -E "passed|failed|error" "$OUT/py.log" | tail -6
