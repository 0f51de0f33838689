"""docs/metal.md names every op of the registry, so a new op cannot reach the Metal backend
without its lowering (or its decomposition, or its refusal) being documented; and its
"Composite ops" table lists every composite as native, composed or refused."""
import pathlib
import re

import mpsgraph as mg

DOC = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "metal.md").read_text()


def _named(name, text):
    return re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", text) is not None


def _composite_table():
    start = DOC.index("### Composite ops: native, composed or refused")
    end = DOC.index("\n### ", start + 1)
    rows = {}
    for line in DOC[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0] not in ("op", "---"):
            for name in re.split(r",\s*", cells[0]):
                rows[name.strip("` ")] = cells[1]
    return rows


def test_every_registry_op_is_named_in_docs_metal_md():
    missing = sorted(s["name"] for s in mg.op_schemas() if not _named(s["name"], DOC))
    assert not missing, f"ops that docs/metal.md does not name (say how the Metal backend runs them): {missing}"


def test_every_composite_has_a_row_saying_native_composed_or_refused():
    rows = _composite_table()
    composites = sorted(s["name"] for s in mg.op_schemas() if s.get("composite"))
    assert composites, "op_schemas() lists no composites"
    missing = [n for n in composites if n not in rows]
    assert not missing, f"composites without a row in docs/metal.md's 'Composite ops' table: {missing}"
    vague = [n for n in composites if not re.match(r"(native|composed|refused|primitive)", rows[n])]
    assert not vague, f"rows that do not say native, composed or refused: {vague}"
