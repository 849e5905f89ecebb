#!/usr/bin/env bash
# The C++ GPU tests under compute-sanitizer (memcheck, racecheck, synccheck, initcheck).
set -u
mkdir -p "$OUT/san"
s=$SECONDS; OUT="$OUT/san" SLUICE_STEP_TIMEOUT=540 timeout 560 bash gpu-bundle/gpu-run sanitize > "$OUT/san.log" 2>&1; rc=$?
echo "== sanitize (rc=$rc, $((SECONDS-s))s)"; tail -14 "$OUT/san.log"
