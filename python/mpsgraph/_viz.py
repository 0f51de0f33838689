"""Reading a graph: text listings (print(g), g.format()) and Graphviz pictures (g.to_dot(),
g.to_svg(), Jupyter's _repr_svg_).

The node data comes from the C++ core (_core.Graph.nodes() and .expanded()); this module
only lays it out. Composites (softmax, gelu, convolution front ends, ...) show as the op
the user wrote; expand_composites=True shows each one's decomposition under it, as the
backends that do not run it natively will see it."""
import shutil
import subprocess
import warnings

import numpy as np

from . import _core

# Ops whose attributes only repeat the output type (shown anyway) or name a variable slot.
_TYPE_ATTRS = {"placeholder": ("shape", "dtype"), "read_variable": ("shape", "dtype", "variable"),
               "assign_variable": ("shape", "dtype", "variable"), "constant": ("value",)}
TINY = 8           # constants with at most this many elements show their value
REPR_NODES = 24    # repr() shows at most this many lines of nodes
SVG_MAX_NODES = 400  # Jupyter draws graphs up to this size (dot is slow beyond)


# ---------------------------------------------------------------------------------------
# the data to show


class _Group:
    """An expanded composite: the node it would have been and the nodes it became."""

    __slots__ = ("op", "name", "attrs", "inputs", "outputs", "results", "first", "end", "parent", "source",
                 "children", "index")

    def __init__(self, d, index):
        for k in ("op", "name", "attrs", "inputs", "outputs", "results", "first", "end", "parent", "source"):
            setattr(self, k, d[k])
        self.results = [tuple(r) for r in self.results]
        self.inputs = [None if r is None else tuple(r) for r in self.inputs]
        self.children = []
        self.index = index


class View:
    """The nodes to show (the graph's own, or its expanded copy's) with the composites'
    groups, the variables' names and the nodes the targets need."""

    def __init__(self, nodes, groups=(), sources=None, source_nodes=None, variable_names=None, variable_values=None,
                 live_sources=None, targets=(), kept=()):
        self.nodes = nodes
        self.kept = list(kept)  # source composites whose decomposition could not be built
        self.groups = [_Group(d, i) for i, d in enumerate(groups)]
        self.roots = []
        self.owner = [None] * len(nodes)  # innermost group holding each node
        for gr in self.groups:  # pre-order: a parent before its children
            (self.groups[gr.parent].children if gr.parent >= 0 else self.roots).append(gr)
            for k in range(gr.first, gr.end):
                self.owner[k] = gr.index
        self.variable_names = variable_names or {}    # slot -> name
        self.variable_values = variable_values or {}  # slot -> TensorData
        self.num_source = len(source_nodes if source_nodes is not None else nodes)
        # which of the shown nodes and groups the targets need (all without targets)
        if live_sources is None:
            self.live = [True] * len(nodes)
            self.live_groups = [True] * len(self.groups)
            self.num_live_source = self.num_source
        else:
            self.num_live_source = sum(live_sources)
            if sources is None:
                self.live = list(live_sources)
            else:
                self.live = [False] * len(nodes)
                for s, (_, first, end) in enumerate(sources):
                    if live_sources[s]:
                        for k in range(first, end):
                            self.live[k] = True
            self.live_groups = [False] * len(self.groups)
            for gr in self.groups:
                top = gr
                while top.parent >= 0:
                    top = self.groups[top.parent]
                self.live_groups[gr.index] = top.source >= 0 and bool(live_sources[top.source])
        self.targets = set(targets)  # (node, index) in the shown nodes

    # -- names --
    def ref_name(self, ref, inside=()):
        """How a reader inside the groups `inside` (indices) calls the value ref: a
        composite's output is called by the composite's name outside its group."""
        n, i = ref
        node = self.nodes[n]
        name = node["name"] + (f"[{i}]" if len(node["outputs"]) > 1 else "")
        g = self.owner[n]
        while g is not None and g not in inside:
            gr = self.groups[g]
            if ref not in gr.results:
                break
            j = gr.results.index(ref)
            name = gr.name + (f"[{j}]" if len(gr.results) > 1 else "")
            g = gr.parent if gr.parent >= 0 else None
        return name

    def ancestors(self, gr):
        """The indices of gr and the groups holding it."""
        out = []
        while gr is not None:
            out.append(gr.index)
            gr = self.groups[gr.parent] if gr.parent >= 0 else None
        return tuple(out)


def type_str(shape, dtype):
    """float32[None, 4]: the dtype and the shape, None for a dim known only at run time."""
    return f"{dtype.name}[{', '.join('None' if d is None else str(d) for d in shape)}]"


def shape_str(shape):
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _value_str(v):
    """A short text for an attribute value (tensors: their value when tiny)."""
    if isinstance(v, _core.TensorData):
        if int(np.prod(v.shape, dtype=np.int64)) <= TINY:
            return _nested(v.numpy())
        return f"<{type_str(v.shape, v.dtype)}>"
    if isinstance(v, _core.DType):
        return v.name
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value_str(x) for x in v) + "]"
    return repr(v)


def _nested(a):
    """[[1.0, 2.0], [3.0, 4.0]]: numpy scalars' own shortest text (0.70710677 for float32)."""
    if a.ndim == 0:
        return str(a[()])
    return "[" + ", ".join(_nested(x) for x in a) + "]"


_DEFAULTS = {}


def _defaults(op):
    d = _DEFAULTS.get(op)
    if d is None:
        from ._ops import SCHEMAS
        d = {a["name"]: a["default"] for a in SCHEMAS.get(op, {}).get("attrs", ()) if not a["required"]}
        _DEFAULTS[op] = d
    return d


def _shown_attrs(op, attrs):
    """The attributes worth printing: those that differ from the op's defaults."""
    skip = _TYPE_ATTRS.get(op, ())
    defaults = _defaults(op)
    out = []
    for k, v in attrs.items():
        if k in skip:
            continue
        if k in defaults and not isinstance(v, _core.TensorData):
            dv = defaults[k]
            try:
                if dv == v or (isinstance(dv, (list, tuple)) and list(dv) == list(v)):
                    continue
            except Exception:  # pragma: no cover - exotic comparisons
                pass
        out.append((k, v))
    return out


def _value_note(v):
    """A constant's or variable's value when tiny, else its size."""
    if not isinstance(v, _core.TensorData):
        return ""
    n = int(np.prod(v.shape, dtype=np.int64))
    return _value_str(v) if n <= TINY else f"<{n} elements>"


def _variable_name(view, vid):
    return view.variable_names.get(vid, f"#{vid}")


# ---------------------------------------------------------------------------------------
# text


def _call(view, op, name, inputs, attrs, outputs, inside):
    """One line (without indent): name: types = op(inputs, attr=value)."""
    args = [("None" if r is None else view.ref_name(r, inside)) for r in inputs]
    while args and inputs[len(args) - 1] is None:  # absent trailing optional inputs
        args.pop()
    shown = op
    if op == "constant":
        args = [_value_note(attrs.get("value"))]
    elif op == "read_variable":  # shown as what the user called: g.variable(value)
        shown, args = "variable", [_value_note(view.variable_values.get(attrs.get("variable")))]
    elif op == "assign_variable":
        args.append(f"variable={_variable_name(view, attrs.get('variable'))}")
    args += [f"{k}={_value_str(v)}" for k, v in _shown_attrs(op, attrs)]
    rhs = f"{shown}({', '.join(args)})"
    if not outputs:
        return f"{name} = {rhs}"
    types = [type_str(s, d) for s, d in outputs]
    ty = types[0] if len(types) == 1 else "(" + ", ".join(types) + ")"
    return f"{name}: {ty} = {rhs}"


def _node_line(view, k, inside):
    n = view.nodes[k]
    line = _call(view, n["op"], n["name"], [None if r is None else tuple(r) for r in n["inputs"]], n["attrs"],
                 n["outputs"], inside)
    if n.get("data_dependent"):  # runs between stages (docs/data_dependent.md)
        line += "  # data-dependent: None dims known once it runs; what uses it runs in a later stage"
    return line


def lines(view, indent="  "):
    """The listing, one entry per line: (text, is_node); a node's text is made on demand
    (a callable), so that a bounded listing of a big graph formats only what it shows."""
    out = []

    def node_entry(pad, k, inside):
        return (lambda: pad + _node_line(view, k, inside)), True

    def emit(children, lo, hi, depth, inside):
        pad = indent * (depth + 1)
        p = lo
        for gr in children:
            out.extend(node_entry(pad, k, inside) for k in range(p, gr.first) if view.live[k])
            if view.live_groups[gr.index]:
                head = _call(view, gr.op, gr.name, gr.inputs, gr.attrs, gr.outputs, inside)
                out.append((pad + head + " {", True))
                inner = view.ancestors(gr)
                emit(gr.children, gr.first, gr.end, depth + 1, inner)
                res = ", ".join(view.ref_name(r, inner) for r in gr.results)
                out.append((pad + indent + "return " + res, False))
                out.append((pad + "}", False))
            p = gr.end
        out.extend(node_entry(pad, k, inside) for k in range(p, hi) if view.live[k])

    emit(view.roots, 0, len(view.nodes), 0, ())
    return out


def header(view, expanded):
    n = view.num_source
    what = f"{n} node" + ("" if n == 1 else "s")
    if view.num_live_source != n:
        what = f"{view.num_live_source} of {what} (those the targets need)"
    groups = [g for g in view.groups if g.parent < 0 and view.live_groups[g.index]]
    if expanded and groups:
        inner = sum(g.end - g.first for g in groups)
        what += f", {len(groups)} composite{'' if len(groups) == 1 else 's'} expanded into {inner} nodes"
    if expanded and view.kept:
        what += f", {len(view.kept)} left folded (the decomposition needs dims known only at run time)"
    elif not expanded:
        c = sum(1 for k, nd in enumerate(view.nodes) if nd["composite"] and view.live[k])
        if c:
            what += f", {c} composite{'' if c == 1 else 's'} (expand_composites=True shows the pieces)"
    return f"Graph({what})"


def format_text(view, expanded, max_nodes=None):
    body = lines(view)
    if max_nodes is not None and len(body) > max_nodes:
        max_nodes = max(int(max_nodes), 2)
        head = (max_nodes + 1) // 2
        tail = max_nodes - head
        hidden = sum(1 for _, is_node in body[head:len(body) - tail] if is_node)
        body = body[:head] + [(f"  ... {hidden} more node{'' if hidden == 1 else 's'} "
                               f"(print(g) or g.format() shows all) ...", False)] + (body[-tail:] if tail else [])
    return "\n".join([header(view, expanded)] + [t() if callable(t) else t for t, _ in body])


# ---------------------------------------------------------------------------------------
# Graphviz

_STYLE = {
    "placeholder": 'shape=box, style="rounded,filled", fillcolor="#d6e9ff", color="#3b7dd8"',
    "constant": 'shape=box, style="filled", fillcolor="#eeeeee", color="#9a9a9a", fontcolor="#444444"',
    "read_variable": 'shape=cylinder, style="filled", fillcolor="#fff1c2", color="#c9a227"',
    "assign_variable": 'shape=cylinder, style="filled,bold", fillcolor="#ffe0b3", color="#d9822b"',
    "composite": 'shape=box3d, style="filled", fillcolor="#eadcff", color="#7b52c7"',
    "op": 'shape=box, style="rounded,filled", fillcolor="#ffffff", color="#555555"',
    "data_dependent": 'shape=box, style="rounded,filled,dashed", fillcolor="#ffe8e8", color="#c0392b"',
}


def _q(s):
    """A DOT double-quoted string."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_label(view, k, prefix=""):
    n = view.nodes[k]
    name = n["name"]
    if prefix and name.startswith(prefix + "/"):  # the cluster's label names the composite
        name = name[len(prefix) + 1:]
    parts = [n["op"], name]
    if n["op"] == "read_variable":
        parts[0] = "variable"
    elif n["op"] == "assign_variable":
        parts[0] = f"assign_variable → {_variable_name(view, n['attrs'].get('variable'))}"
    if n["op"] in ("constant", "read_variable"):
        v = n["attrs"].get("value") if n["op"] == "constant" else view.variable_values.get(n["attrs"].get("variable"))
        note = _value_note(v)
        if note and not note.startswith("<"):
            parts.append(note)
    parts += [type_str(s, d) for s, d in n["outputs"]]
    if n.get("data_dependent"):
        parts.append("data-dependent: ends a stage")
    if len(parts[1]) > 48:  # long expanded names: the tail says enough
        parts[1] = "..." + parts[1][-45:]
    return "\n".join(parts)


def format_dot(view, name="mpsgraph"):
    out = [f"digraph {_q(name)} {{",
           '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.25, ranksep=0.35];',
           '  node [fontname="Helvetica", fontsize=10, margin="0.12,0.04"];',
           '  edge [fontname="Helvetica", fontsize=9, color="#666666", fontcolor="#555555"];']

    def node_stmt(k, pad, prefix):
        n = view.nodes[k]
        op = n["op"]
        style = _STYLE.get(op) or (_STYLE["composite"] if n["composite"] else _STYLE["op"])
        if n.get("data_dependent"):
            style = _STYLE["data_dependent"]
        extra = ", penwidth=2.5" if any(t[0] == k for t in view.targets) else ""
        return f"{pad}n{k} [label={_q(_dot_label(view, k, prefix))}, {style}{extra}];"

    def emit(children, lo, hi, depth, prefix):
        pad = "  " * (depth + 1)
        p = lo
        for gr in children:
            out.extend(node_stmt(k, pad, prefix) for k in range(p, gr.first) if view.live[k])
            if view.live_groups[gr.index]:
                out.append(f"{pad}subgraph cluster_{gr.index} {{")
                out.append(f"{pad}  label={_q(gr.name + ' (' + gr.op + ')')}; labeljust=l; fontsize=10;")
                out.append(f'{pad}  style="rounded,dashed"; color="#7b52c7"; fontcolor="#5a3aa0";')
                emit(gr.children, gr.first, gr.end, depth + 1, gr.name)
                out.append(f"{pad}}}")
            p = gr.end
        out.extend(node_stmt(k, pad, prefix) for k in range(p, hi) if view.live[k])

    emit(view.roots, 0, len(view.nodes), 0, "")
    for k, n in enumerate(view.nodes):
        if not view.live[k]:
            continue
        for r in n["inputs"]:
            if r is None:
                continue
            src, i = r
            prod = view.nodes[src]
            shape, dtype = prod["outputs"][i]
            label = shape_str(shape) + (f" [{i}]" if len(prod["outputs"]) > 1 else "")
            out.append(f"  n{src} -> n{k} [label={_q(label)}];")
    out.append("}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------
# rendering

INSTALL_HINT = ("rendering a graph picture needs Graphviz: `pip install graphviz` (or `pip install mpsgraph[viz]`) "
                "and the Graphviz programs (`apt-get install graphviz`, `brew install graphviz` or "
                "`conda install graphviz`) so that `dot` is on PATH; g.to_dot() gives the DOT source without either")


class GraphvizNotFound(RuntimeError):
    """Graphviz is needed to render a picture and is not installed."""


def render_svg(dot_source):
    """SVG text for DOT source, through the graphviz package or else the dot program."""
    try:
        import graphviz
    except ImportError:
        graphviz = None
    if graphviz is not None:
        try:
            return graphviz.Source(dot_source).pipe(format="svg", encoding="utf-8")
        except graphviz.ExecutableNotFound:
            raise GraphvizNotFound(INSTALL_HINT + " (the graphviz package is installed, the dot program is not)") \
                from None
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizNotFound(INSTALL_HINT)
    r = subprocess.run([dot, "-Tsvg"], input=dot_source.encode(), capture_output=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"dot failed ({r.returncode}): {r.stderr.decode(errors='replace').strip()}")
    return r.stdout.decode("utf-8")


_warned = False


def repr_svg(graph):
    """Jupyter's rich display: an SVG when Graphviz is there and the graph is not huge, else
    None (the text repr shows) with a one-time warning naming what to install."""
    global _warned
    if graph.num_nodes == 0 or graph.num_nodes > SVG_MAX_NODES:
        return None
    try:
        return graph.to_svg()
    except GraphvizNotFound as e:
        if not _warned:
            _warned = True
            warnings.warn(str(e), RuntimeWarning, stacklevel=2)
        return None


# ---------------------------------------------------------------------------------------
# from a Graph


def _live_sources(nodes, roots):
    live = [False] * len(nodes)
    stack = list(roots)
    while stack:
        k = stack.pop()
        if live[k]:
            continue
        live[k] = True
        stack.extend(r[0] for r in nodes[k]["inputs"] if r is not None)
    return live


def view_of(graph, expand_composites=False, targets=None, op="format"):
    """The View of a mpsgraph.Graph: its nodes, or its expanded copy, pruned to targets."""
    from ._graph import Operation, Tensor, GraphValueError, _targets_list
    src = graph._g.nodes()
    variable_names, variable_values = {}, {}
    for n in src:
        if n["op"] == "read_variable":
            vid = n["attrs"]["variable"]
            if vid not in variable_names:
                variable_names[vid] = n["name"]
                variable_values[vid] = graph._g.variable_value(vid)
    target_refs = []
    live = None
    if targets is not None:
        roots = []
        for t in _targets_list(targets):
            if isinstance(t, Tensor):
                graph._check_tensor(t, op, "target")
                target_refs.append((t.node, t.index))
                roots.append(t.node)
            elif isinstance(t, Operation) and t.graph is graph:
                target_refs.append((t.node, 0))
                roots.append(t.node)
            else:
                raise GraphValueError(f"[{op}] target {t!r} is not a Tensor or Operation of this graph")
        live = _live_sources(src, roots)
    if not expand_composites:
        return View(src, variable_names=variable_names, variable_values=variable_values, live_sources=live,
                    targets=target_refs)
    e = graph._g.expanded()
    sources = e["sources"]
    shown_targets = []
    for n, i in target_refs:
        outs, first, end = sources[n]
        shown_targets.append(tuple(outs[i]) if i < len(outs) else (end - 1, 0))
    return View(e["nodes"], e["groups"], sources=sources, source_nodes=src, variable_names=variable_names,
                variable_values=variable_values, live_sources=live, targets=shown_targets,
                kept=[k for k in e["kept"] if live is None or live[k]])


def graph_format(graph, expand_composites=False, max_nodes=None, targets=None):
    view = view_of(graph, expand_composites, targets)
    return format_text(view, expand_composites, max_nodes)


def graph_to_dot(graph, expand_composites=False, targets=None):
    return format_dot(view_of(graph, expand_composites, targets, "to_dot"))


__all__ = ["graph_format", "graph_to_dot", "render_svg", "repr_svg", "GraphvizNotFound", "View"]
