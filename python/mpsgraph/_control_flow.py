"""Control flow in MPSGraph's shape: if/while/for/control-dependency with regions.

Each Python callable runs once, when the op is built, into a region of the graph; regions
read tensors of the enclosing graph (captured values), nest, and may read and assign
variables (reads see the value from before the run; an assign inside a region lands when
the run completes, if the region ran). The logic lives in C++ (cpp/core/control_flow.h);
this mixin turns callables into regions and results back into Tensors.
"""
from ._core import GraphTypeError, GraphValueError
from ._dtypes import int32


def _as_list(res, what):
    """A block's results: None (nothing), one Tensor, or a list/tuple of Tensors."""
    from ._graph import Tensor
    if res is None:
        return [], "none"
    if isinstance(res, Tensor):
        return [res], "single"
    if isinstance(res, (list, tuple)):
        for r in res:
            if not isinstance(r, Tensor):
                raise GraphTypeError(f"{what} must return Tensors, got {type(r).__name__} among its results")
        return list(res), "tuple"
    raise GraphTypeError(f"{what} must return a Tensor, a list of Tensors or None, got {type(res).__name__}")


class ControlFlowMixin:
    def _region(self, fn, arg_types, op, block, adapt=None):
        """Runs fn once into a new region; returns (region, its results, their structure)."""
        what = f"the {block} of {op}"
        refs = self._g.begin_region(arg_types, what)
        try:
            args = [self._tensor(n, i) for n, i in refs]
            res = fn(*args)
            if adapt is not None:
                res = adapt(res, args)
            results, kind = _as_list(res, f"[{op}] the {block}")
            for r in results:
                self._check_tensor(r, op, f"a result of the {block}")
            region = self._g.end_region([(r.node, r.index) for r in results])
        except BaseException:
            self._g.abandon_region()
            raise
        return region, results, kind

    def _scalar_operand(self, v, op, what, dtype=None):
        from ._graph import Tensor
        if isinstance(v, Tensor):
            return self._check_tensor(v, op, what)
        return self.constant(v, dtype=dtype)

    def _operands(self, values, op, what):
        from ._graph import Tensor
        if isinstance(values, Tensor):
            values = [values]
        if not isinstance(values, (list, tuple)):
            raise GraphTypeError(f"[{op}] {what} must be a list of Tensors, got {type(values).__name__}")
        return [self._scalar_operand(v, op, what) for v in values]

    def if_then_else(self, predicate, then_fn, else_fn=None, name=None):
        """MPSGraph's ifWithPredicateTensor:thenBlock:elseBlock:. `predicate` is a bool scalar
        tensor; then_fn() and else_fn() (no arguments) each run once, now, into a region and
        return the same number of tensors with matching dtypes and ranks (a Tensor, a list of
        Tensors or None). At run time only the taken branch executes. Returns what the
        branches return (a Tensor, a tuple, or None). Differentiable (to any order) with
        respect to the tensors the branches read."""
        pred = self._scalar_operand(predicate, "if_then_else", "predicate")
        then_r, _, kind = self._region(then_fn, [], "if_then_else", "then block")
        if else_fn is None:
            else_fn = lambda: None  # noqa: E731  (MPSGraph's nil else block)
        else_r, _, _ = self._region(else_fn, [], "if_then_else", "else block")
        outs = self._g.build_if((pred.node, pred.index), then_r, else_r, name or "")
        return self._structure([self._tensor(n, i) for n, i in outs], kind)

    @staticmethod
    def _structure(ts, kind):
        if kind == "none" and not ts:
            return None
        if kind == "single" and len(ts) == 1:
            return ts[0]
        return tuple(ts)

    def while_loop(self, initial_inputs, cond_fn, body_fn, name=None, checkpoint=False):
        """MPSGraph's whileWithInitialInputs:before:after:. cond_fn(*values) is the before block:
        it returns the bool scalar predicate and the values passed on, as `(pred, [values])`,
        `[pred, *values]`, or just `pred` (the values pass on unchanged). While the predicate is
        true, body_fn(*passed) (the after block) returns the next loop-carried values (same
        dtypes and shapes as initial_inputs); when it is false the passed values are the result
        (a tuple).

        Gradients: g.gradients works through the loop. By default the backward pass keeps every
        iteration's carried values (memory: trip count x their size); checkpoint=True keeps only
        every ~sqrt(n)-th state and recomputes the others (about one extra forward pass).
        Second-order gradients through loops are not supported."""
        init = self._operands(initial_inputs, "while_loop", "initial_inputs")
        types = [(t.shape, t.dtype) for t in init]
        from ._graph import Tensor

        def predicate_and_values(res, args):
            if isinstance(res, Tensor):  # only the predicate: the arguments pass on
                return [res, *args]
            if isinstance(res, (list, tuple)) and len(res) == 2 and isinstance(res[1], (list, tuple)):
                return [res[0], *res[1]]  # (predicate, [values passed on])
            return res

        before, bres, _ = self._region(cond_fn, types, "while_loop", "before block", predicate_and_values)
        passed = [(t.shape, t.dtype) for t in bres[1:]]
        after, _, _ = self._region(body_fn, passed, "while_loop", "after block")
        outs = self._g.build_while([(t.node, t.index) for t in init], before, after, name or "", bool(checkpoint))
        return tuple(self._tensor(n, i) for n, i in outs)

    def for_loop(self, *args, name=None, checkpoint=False):
        """for_loop(n, initial_args, body_fn) or for_loop(lower, upper, step, initial_args, body_fn):
        MPSGraph's forLoopWithNumberOfIterations: and forLoopWithLowerBound:upperBound:step:.
        body_fn(index, *values) runs once, now, into a region and returns the next values (same
        dtypes and shapes); at run time it runs for index = lower, lower + step, ... while
        index < upper (int32; step must be positive). Bounds are Python ints or int32 scalar
        tensors. Returns the final values (a tuple). Gradients as for while_loop."""
        if len(args) == 3:
            n, initial, body_fn = args
            lower, upper, step = 0, n, 1
        elif len(args) == 5:
            lower, upper, step, initial, body_fn = args
        else:
            raise GraphTypeError("[for_loop] takes (n, initial_args, body_fn) or "
                                 "(lower, upper, step, initial_args, body_fn)")
        bounds = [self._scalar_operand(b, "for_loop", w, dtype=int32)
                  for b, w in ((lower, "lower"), (upper, "upper"), (step, "step"))]
        init = self._operands(initial, "for_loop", "initial_args")
        types = [((), int32)] + [(t.shape, t.dtype) for t in init]
        body, _, _ = self._region(body_fn, types, "for_loop", "body")
        outs = self._g.build_for(*[(b.node, b.index) for b in bounds], [(t.node, t.index) for t in init], body,
                                 name or "", bool(checkpoint))
        return tuple(self._tensor(n, i) for n, i in outs)

    def control_dependency(self, operations, dependent_fn, name=None):
        """MPSGraph's controlDependencyWithOperations:dependentBlock:. Runs dependent_fn() now and
        returns its tensors; whenever a run computes one of them (or anything made from them),
        the given operations (for example variable assigns) run too."""
        from ._graph import Operation, Tensor
        ops = []
        for o in (operations if isinstance(operations, (list, tuple)) else [operations]):
            if isinstance(o, Tensor):
                o = o.operation
            if not isinstance(o, Operation) or o.graph is not self:
                raise GraphValueError(f"[control_dependency] {o!r} is not an Operation of this graph")
            ops.append(o.node)
        res = dependent_fn()
        results, kind = _as_list(res, "[control_dependency] the dependent block")
        out = []
        for r in results:
            self._check_tensor(r, "control_dependency", "result")
            t = self.identity(r, name=name)
            self._control_deps[t.node] = list(ops)
            out.append(t)
        return self._structure(out, kind)

    def _dependent_operations(self, targets):
        """The operations that control_dependency attached upstream of targets."""
        deps = self._control_deps
        if not deps:
            return []
        seen, stack, ops = set(), [t.node for t in targets], []
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            ops.extend(o for o in deps.get(n, ()) if o not in ops)
            stack.extend(m for m, _ in self._g.node_inputs(n))
        return ops
