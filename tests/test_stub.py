"""The editor stub python/mpsgraph/_graph.pyi matches the registry (regenerate it with
`python -m mpsgraph._stubgen` after adding ops)."""
import os

import mpsgraph
from mpsgraph import _stubgen


def test_stub_is_current():
    path = os.path.join(os.path.dirname(mpsgraph.__file__), "_graph.pyi")
    with open(path) as f:
        assert f.read() == _stubgen.render(), "regenerate with: python -m mpsgraph._stubgen"
