// Cayley SGD on the Stiefel manifold of orthogonal matrices (Li, Li, Todorovic 2020, "Efficient Riemannian
// optimization on the Stiefel manifold via the Cayley transform"; the optimiser SpinQuant trains R1/R2 with).
// No torch: the gradient comes in, the updated matrix goes out, in double precision.
#pragma once
#include <Eigen/Dense>

namespace lowbit::train {

// One descent step for R (orthogonal, n x n) with the Euclidean gradient G = dLoss/dR:
//   W = G R^T - R G^T (skew-symmetric: the Riemannian gradient moved to the identity),
//   R <- (I + lr/2 W)^-1 (I - lr/2 W) R.
// The Cayley transform of a skew matrix is orthogonal, so R stays orthogonal up to rounding; to first order
// R <- R - lr (G - R G^T R), the projected gradient step.
void cayley_step(Eigen::MatrixXd& R, const Eigen::MatrixXd& G, double lr);

// ||R R^T - I||_max: how far R is from orthogonal.
double orthogonality_error(const Eigen::MatrixXd& R);

}  // namespace lowbit::train
