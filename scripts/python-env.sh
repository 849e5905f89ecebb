# Sourced by the scripts: SLUICE_PYTHON is the interpreter the Python module
# is built for and tested with. By default the system's python3 (the one
# Debian's python3-dev, pybind11-dev, numpy, pytest and torch belong to).
if [ -z "${SLUICE_PYTHON:-}" ]; then
  SLUICE_PYTHON=python3
  for candidate in /usr/bin/python3; do [ -x "$candidate" ] && SLUICE_PYTHON="$candidate"; done
fi
export SLUICE_PYTHON
