# Sourced by the scripts: SLUICE_PYTHON is the interpreter the Python module
# is built for and tested with. By default the system's python3 (the one
# Debian's python3-dev, pybind11-dev, numpy and pytest belong to); set
# SLUICE_PYTHON to build for another (it needs pybind11: pip install pybind11).
if [ -z "${SLUICE_PYTHON:-}" ]; then
  SLUICE_PYTHON=python3
  for candidate in /usr/bin/python3; do [ -x "$candidate" ] && SLUICE_PYTHON="$candidate"; done
fi
export SLUICE_PYTHON
sluice_python_cmake_args() {
  local args=(-DSLUICE_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$(command -v "$SLUICE_PYTHON")")
  local dir
  if dir="$("$SLUICE_PYTHON" -m pybind11 --cmakedir 2>/dev/null)"; then args+=("-Dpybind11_DIR=$dir"); fi
  printf '%s\n' "${args[@]}"
}
