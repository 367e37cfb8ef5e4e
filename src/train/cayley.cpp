// Cayley SGD step (see cayley.h).
#include "train/cayley.h"

namespace lowbit::train {

void cayley_step(Eigen::MatrixXd& R, const Eigen::MatrixXd& G, double lr) {
  const Eigen::Index n = R.rows();
  const Eigen::MatrixXd W = G * R.transpose() - R * G.transpose();
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n);
  const Eigen::MatrixXd A = I + (lr / 2) * W;
  // A = I + skew is never singular (its eigenvalues are 1 + i*t); LU with partial pivoting solves it.
  R = A.partialPivLu().solve((I - (lr / 2) * W) * R);
}

double orthogonality_error(const Eigen::MatrixXd& R) {
  return (R * R.transpose() - Eigen::MatrixXd::Identity(R.rows(), R.rows())).cwiseAbs().maxCoeff();
}

}  // namespace lowbit::train
