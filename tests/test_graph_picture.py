"""A graph you can read: print(g) / g.format() listings and g.to_dot() / g.to_svg() pictures.
Composites show as the op the user wrote; expand_composites=True shows their pieces."""
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mpsgraph as mg
from mpsgraph import _viz

import conformance as C


def small_graph():
    g = mg.Graph()
    x = g.placeholder((None, 4), name="x")
    w = g.variable(np.ones((4, 3), np.float32), name="w")
    b = g.variable(np.zeros((3,), np.float32), name="b")
    y = g.softmax(x @ w + b, axis=1)
    loss = g.reduction_sum(g.gelu(y) * 2.0, axes=[0, 1])
    return g, x, w, y, loss


# ------------------------------------------------------------------------------ text


def test_text_names_the_composite_not_its_pieces():
    g, x, w, y, loss = small_graph()
    text = str(g)
    lines = text.splitlines()
    assert lines[0].startswith("Graph(") and "composite" in lines[0]
    assert len(lines) == 1 + g.num_nodes  # one line per node
    soft = [ln for ln in lines if "= softmax(" in ln]
    assert soft == ["  softmax_0: float32[None, 3] = softmax(addition_0, axis=1)"]
    assert "exponent" not in text and "reduction_maximum" not in text
    assert "gelu_0: float32[None, 3] = gelu(softmax_0)" in text
    # inputs by name, attributes that differ from the defaults
    assert "matrix_multiplication_0: float32[None, 3] = matrix_multiplication(x, w)" in text
    assert "reduction_sum_0: float32[1, 1] = reduction_sum(multiplication_0, axes=[0, 1])" in text


def test_unknown_dims_print_as_none():
    g = mg.Graph()
    x = g.placeholder((None, 3, None), mg.float16, name="x")
    g.relu(x, name="r")
    text = g.format()
    assert "x: float16[None, 3, None] = placeholder()" in text
    assert "r: float16[None, 3, None] = relu(x)" in text


def test_expand_shows_each_composite_decomposition_indented_under_it():
    g, x, w, y, loss = small_graph()
    n = g.num_nodes
    text = g.format(expand_composites=True)
    assert g.num_nodes == n  # expanding works on a copy
    lines = text.splitlines()
    assert "2 composites expanded into" in lines[0]
    head = lines.index("  softmax_0: float32[None, 3] = softmax(addition_0, axis=1) {")
    body = []
    for ln in lines[head + 1:]:
        if ln == "  }":
            break
        body.append(ln)
    assert all(ln.startswith("    ") for ln in body)
    ops = [re.search(r"= (\w+)\(", ln).group(1) for ln in body if " = " in ln]
    assert "exponent" in ops and "reduction_sum" in ops and "division" in ops
    assert all(ln.split(":")[0].strip().startswith("softmax_0/") for ln in body if " = " in ln)
    assert body[-1].startswith("    return softmax_0/division")
    # the decomposition reads the composite's input by its own name; consumers of the
    # composite still call it softmax_0
    assert any(re.search(r"reduction_maximum\(addition_0", ln) for ln in body)
    assert "  gelu_0: float32[None, 3] = gelu(softmax_0) {" in lines
    assert any("gelu_0/" in ln and "erf(" in ln for ln in lines)
    # an op that is not a composite reads the same either way
    assert "  matrix_multiplication_0: float32[None, 3] = matrix_multiplication(x, w)" in lines


def test_constants_and_variables_are_summarised():
    g = mg.Graph()
    x = g.placeholder((2,), name="x")
    small = g.constant([1.5, -2.0], name="small")
    big = g.constant(np.zeros((100, 10), np.float32), name="big")
    half = g.constant(0.5, dtype=mg.bfloat16, name="half")
    flags = g.constant([True, False], name="flags")
    v = g.variable(np.arange(3, dtype=np.int32), name="counter")
    g.assign(v, v + 1)
    text = g.format()
    assert "small: float32[2] = constant([1.5, -2.0])" in text
    assert "big: float32[100, 10] = constant(<1000 elements>)" in text
    assert "half: bfloat16[] = constant(0.5)" in text
    assert "flags: bool[2] = constant([True, False])" in text
    assert "counter: int32[3] = variable([0, 1, 2])" in text
    assert re.search(r"assign_variable_0 = assign_variable\(addition_0, variable=counter\)", text)
    assert "0.0, 0.0, 0.0" not in text  # a big value is never spelled out


def test_multi_output_ops_and_their_consumers():
    g = mg.Graph()
    x = g.placeholder((None, 6), name="x")
    a, b, c = g.split(x, num_splits=3, axis=1)
    g.addition(b, c, name="s")
    mean, var = g.moments(x, axes=[1])
    text = g.format()
    assert "split_0: (float32[None, 2], float32[None, 2], float32[None, 2]) = split(x, axis=1, num_splits=3)" in text
    assert "s: float32[None, 2] = addition(split_0[1], split_0[2])" in text
    expanded = g.format(expand_composites=True)
    assert re.search(r"return moments_0/\w+, moments_0/\w+", expanded)


def test_repr_is_bounded_and_str_shows_everything():
    g = mg.Graph()
    t = g.placeholder((None,), name="start")
    for i in range(300):
        t = g.relu(t, name=f"r{i}")
    r = repr(g)
    assert len(r.splitlines()) <= _viz.REPR_NODES + 2
    assert "start: float32[None] = placeholder()" in r  # first nodes
    assert "r299: float32[None] = relu(r298)" in r       # last nodes
    assert re.search(r"\.\.\. \d+ more nodes", r)
    assert "r150:" not in r
    s = str(g)
    assert len(s.splitlines()) == 1 + 301 and "r150: float32[None] = relu(r149)" in s
    bounded = g.format(max_nodes=4).splitlines()
    assert len(bounded) == 1 + 4 + 1 and "297 more nodes" in bounded[3]
    assert repr(mg.Graph()) == "Graph(0 nodes)"


def test_targets_keep_what_they_need():
    g, x, w, y, loss = small_graph()
    unrelated = g.negative(x, name="unrelated")
    text = g.format(targets=[y])
    assert "unrelated" not in text and "gelu" not in text and "softmax_0" in text
    assert text.splitlines()[0].startswith(f"Graph(6 of {g.num_nodes} nodes")
    op = g.assign(w, w * 2.0)
    t2 = g.format(targets=op, expand_composites=True)
    assert "assign_variable(" in t2 and "softmax" not in t2 and "unrelated" not in t2
    with pytest.raises(mg.GraphValueError, match="another graph"):
        g.format(targets=[mg.Graph().placeholder((1,))])


# composites whose decomposition is unrolled over a matrix size (the linalg ones other backends
# run): with unknown dims they stay folded until specialisation knows the size
STATIC_SIZE_DECOMPOSITIONS = {"cholesky", "triangular_solve", "determinant", "log_determinant"}


def test_every_composite_of_the_conformance_table_expands_with_unknown_dims():
    composites = {s["name"] for s in mg.op_schemas() if s["composite"]}
    seen = set()
    for row in C.ROWS:
        if row.op not in composites:
            continue
        g = mg.Graph()
        for case in C.cases_for(row, "float32"):
            n_in = len(case.values) if case.values is not None else len(case.shapes)
            shapes = [np.shape(v) for v in case.values] if case.values is not None else case.shapes
            dts = row.in_dtypes("float32", n_in)
            attrs = dict(case.attrs)
            if row.dtype_attr:
                attrs[row.dtype_attr] = "float32"
            try:  # every dim unknown where the op allows it (some need the channels), else static
                if row.op in STATIC_SIZE_DECOMPOSITIONS:
                    raise mg.GraphError("unrolled over a known size")
                C.build(g, row, [g.placeholder((None,) * len(s), d) for s, d in zip(shapes, dts)], attrs)
            except mg.GraphError:
                C.build(g, row, [g.placeholder(s, d) for s, d in zip(shapes, dts)], attrs)
        folded = g.format()
        assert f"= {row.op}(" in folded, row.op
        expanded = g.format(expand_composites=True)
        assert "left folded" not in expanded, (row.op, expanded.splitlines()[0])
        assert re.search(rf"= {row.op}\(.*\{{$", expanded, re.M), row.op
        seen.add(row.op)
    assert len(seen) >= 10


# ------------------------------------------------------------------------------ DOT


def dot_problems(source):
    """Balanced braces (outside quoted strings), one digraph, every edge endpoint declared."""
    problems = []
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', source)
    depth = 0
    for ch in bare:
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            problems.append("a '}' closes nothing")
            depth = 0
    if depth:
        problems.append(f"{depth} '{{' left open")
    if not re.match(r'\s*digraph\s+"[^"]*"\s*\{', source):
        problems.append("does not start as a digraph")
    declared = set(re.findall(r"^\s*(n\d+) \[label=", source, re.M))
    for a, b in re.findall(r"^\s*(n\d+) -> (n\d+)", source, re.M):
        problems += [f"edge endpoint {e} is not declared" for e in (a, b) if e not in declared]
    return problems


def test_dot_structure_folded():
    g, x, w, y, loss = small_graph()
    dot = g.to_dot()
    assert dot_problems(dot) == []
    assert "cluster_" not in dot
    decls = re.findall(r"^\s*(n\d+) \[label=\"([^\"]*)\"(.*)\];$", dot, re.M)
    assert len(decls) == g.num_nodes
    labels = {lab.replace("\\n", "\n") for _, lab, _ in decls}
    assert "softmax\nsoftmax_0\nfloat32[None, 3]" in labels  # op, name, type
    assert "placeholder\nx\nfloat32[None, 4]" in labels
    assert not any(lab.startswith("exponent") for lab in labels)
    style = {lab.split("\\n")[1]: rest for _, lab, rest in decls}
    kinds = {style["x"], style["w"], style[[k for k in style if k.startswith("constant")][0]],
             style["matrix_multiplication_0"]}
    assert len(kinds) == 4  # placeholders, variables, constants and ops look different
    assert "box3d" in style["softmax_0"]  # a folded composite stands out too
    # edges carry the producer's shape
    assert re.search(r'n\d+ -> n\d+ \[label="\(None, 4\)"\];', dot)
    assert re.search(r'n\d+ -> n\d+ \[label="\(4, 3\)"\];', dot)
    n_edges = len(re.findall(r"^\s*n\d+ -> n\d+", dot, re.M))
    assert n_edges == sum(len(op.input_tensors) for op in g.operations)


def test_dot_expanded_has_a_cluster_per_composite():
    g, x, w, y, loss = small_graph()
    dot = g.to_dot(expand_composites=True)
    assert dot_problems(dot) == []
    clusters = re.findall(r"subgraph (cluster_\w+) \{\s*label=\"([^\"]*)\"", dot)
    assert [lab for _, lab in clusters] == ["softmax_0 (softmax)", "gelu_0 (gelu)"]
    # the decomposition's nodes are inside the cluster
    start = dot.index("subgraph " + clusters[0][0])
    end = dot.index("subgraph " + clusters[1][0])
    inside = dot[start:end]
    assert "exponent\\n" in inside and "division\\n" in inside
    assert "softmax\\nsoftmax_0" not in dot  # no folded node for an expanded composite


def test_dot_targets_prune_and_mark():
    g, x, w, y, loss = small_graph()
    g.negative(x, name="unrelated")
    dot = g.to_dot(targets=[y])
    assert dot_problems(dot) == []
    assert "unrelated" not in dot and "gelu" not in dot
    assert len(re.findall(r"penwidth=2.5", dot)) == 1
    dot2 = g.to_dot(expand_composites=True, targets=y)
    assert dot_problems(dot2) == [] and "cluster_" in dot2 and "gelu" not in dot2


def test_dot_quotes_names():
    g = mg.Graph()
    x = g.placeholder((2,), name='in "quotes" \\ back')
    g.relu(x, name="out")
    dot = g.to_dot()
    assert dot_problems(dot) == []
    assert 'in \\"quotes\\" \\\\ back' in dot


def test_nested_composites_nest_in_text_and_dot():
    # No composite of the registry builds another one today, so this lays out by hand the
    # data that _core.Graph.expanded() gives for an outer composite holding an inner one.
    f32 = mg.float32

    def node(name, op, inputs, shape=(None, 3)):
        return {"name": name, "op": op, "inputs": inputs, "outputs": [(shape, f32)], "attrs": {}, "composite": False}

    nodes = [node("x", "placeholder", []),
             node("outer_0/a", "exponent", [(0, 0)]),
             node("outer_0/inner_0/b", "negative", [(1, 0)]),
             node("outer_0/c", "addition", [(1, 0), (2, 0)]),
             node("y", "relu", [(3, 0)])]
    groups = [{"op": "outer", "name": "outer_0", "attrs": {}, "inputs": [(0, 0)], "outputs": [((None, 3), f32)],
               "results": [(3, 0)], "first": 1, "end": 4, "parent": -1, "source": 1},
              {"op": "inner", "name": "outer_0/inner_0", "attrs": {}, "inputs": [(1, 0)],
               "outputs": [((None, 3), f32)], "results": [(2, 0)], "first": 2, "end": 3, "parent": 0, "source": -1}]
    sources = [([(0, 0)], 0, 1), ([(3, 0)], 1, 4), ([(4, 0)], 4, 5)]
    view = _viz.View(nodes, groups, sources=sources, source_nodes=[None] * 3)
    text = _viz.format_text(view, True)
    assert text.splitlines()[1:] == [
        "  x: float32[None, 3] = placeholder()",
        "  outer_0: float32[None, 3] = outer(x) {",
        "    outer_0/a: float32[None, 3] = exponent(x)",
        "    outer_0/inner_0: float32[None, 3] = inner(outer_0/a) {",
        "      outer_0/inner_0/b: float32[None, 3] = negative(outer_0/a)",
        "      return outer_0/inner_0/b",
        "    }",
        "    outer_0/c: float32[None, 3] = addition(outer_0/a, outer_0/inner_0)",
        "    return outer_0/c",
        "  }",
        "  y: float32[None, 3] = relu(outer_0)",
    ]
    dot = _viz.format_dot(view)
    assert dot_problems(dot) == []
    outer = dot.index('label="outer_0 (outer)"')
    inner = dot.index('label="outer_0/inner_0 (inner)"')
    assert outer < inner < dot.index('label="negative\\nb\\n')  # the inner cluster sits in the outer one


# ------------------------------------------------------------------------------ pictures


def graphviz_available():
    try:
        import graphviz  # noqa: F401
        have_package = True
    except ImportError:
        have_package = False
    return have_package, shutil.which("dot") is not None


def test_svg_renders_or_says_what_to_install():
    g, x, w, y, loss = small_graph()
    have_package, have_dot = graphviz_available()
    if have_dot:
        svg = g.to_svg(expand_composites=True)
        assert svg.lstrip().startswith("<?xml") or svg.lstrip().startswith("<svg")
        assert "<svg" in svg and "softmax_0 (softmax)" in svg
        assert "<svg" in g._repr_svg_()
    else:
        with pytest.raises(_viz.GraphvizNotFound, match="pip install graphviz"):
            g.to_svg()


def test_missing_graphviz_gives_a_clear_error(monkeypatch):
    g, x, w, y, loss = small_graph()
    monkeypatch.setitem(sys.modules, "graphviz", None)  # `import graphviz` fails
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(RuntimeError) as e:
        g.to_svg()
    msg = str(e.value)
    assert "pip install graphviz" in msg and "dot" in msg and "to_dot()" in msg
    # Jupyter falls back to the text repr, with one warning naming what to install
    monkeypatch.setattr(_viz, "_warned", False)
    with pytest.warns(RuntimeWarning, match="pip install graphviz"):
        assert g._repr_svg_() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert g._repr_svg_() is None  # said once


def test_dot_program_renders_without_the_python_package(monkeypatch):
    have_package, have_dot = graphviz_available()
    g, x, w, y, loss = small_graph()
    monkeypatch.setitem(sys.modules, "graphviz", None)
    if have_dot:
        assert "<svg" in g.to_svg()
    else:
        with pytest.raises(_viz.GraphvizNotFound, match="apt-get install graphviz"):
            g.to_svg()


def test_dot_accepts_the_source_when_installed():
    have_package, have_dot = graphviz_available()
    g, x, w, y, loss = small_graph()
    sources = [g.to_dot(), g.to_dot(expand_composites=True)]
    if not have_dot:
        assert all(dot_problems(s) == [] for s in sources)  # the structural check is what we can do
        return
    for s in sources:
        r = subprocess.run([shutil.which("dot"), "-Tcanon"], input=s.encode(), capture_output=True)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr.decode()
