# Sourced by the device scripts (after `cd` to the repository root): installs the wheels carried in
# .whl/ (pydantic and its needs, absent on the GPU machine) to /tmp/site and puts it on PYTHONPATH.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
