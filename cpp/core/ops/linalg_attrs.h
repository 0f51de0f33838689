// Typed attributes of the linear-algebra family (core/ops/linalg.cpp), as kernels and lowerings
// read them: typed_attrs<CholeskyAttrs>(node) and so on (core/typed_attrs.h).
#pragma once

namespace mg::ops {

// cholesky: upper returns U = L^T and reads the upper triangle; otherwise L from the lower one.
struct CholeskyAttrs {
  bool upper = false;
};

// triangular_solve: A X = B (left) or X A = B (right) with A triangular.
struct TriangularSolveAttrs {
  bool upper = false;
  bool left = true;
  bool unit_diagonal = false;  // the diagonal of A is taken as ones and never read
};

}  // namespace mg::ops
