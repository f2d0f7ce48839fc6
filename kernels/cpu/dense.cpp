#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/matmul.hpp"

namespace syncfac::cpu {

namespace {

void add_bias_rows(const float* b, int64_t cols, float* y, range rows) {
  for (auto r = rows.begin; r < rows.end; ++r)
    for (int64_t o = 0; o < cols; ++o)
      y[r * cols + o] += b[o];
}

} // namespace

caf::error cpu_backend::dense_forward(const tensor& x, const tensor& w,
                                      const tensor& b, activation act,
                                      tensor& y) {
  if (auto err = check_dense_forward("dense_forward", x, w, b))
    return err;
  auto n = x.dim(0);
  auto out = w.dim(1);
  y.resize({n, out});
  matrix_operand mx{x.data(), n, x.dim(1), false};
  matrix_operand mw{w.data(), w.dim(0), out, false};
  auto team = matmul_team(threads_, n, out, x.dim(1));
  // Each thread finishes its rows (bias, activation) while they are cached.
  eigen_team(team, [&](int t, int size) {
    auto rows = split(n, size, t);
    matmul_block(mx, mw, 1.0f, 0.0f, y.data(), rows, {0, out});
    add_bias_rows(b.data(), out, y.data(), rows);
    apply_activation(act, y.data() + rows.begin * out,
                     (rows.end - rows.begin) * out);
  });
  return caf::none;
}

caf::error cpu_backend::dense_backward(const tensor& x, const tensor& w,
                                       const tensor& y, const tensor& dy,
                                       activation act, tensor& ds,
                                       tensor& dw, tensor& db, tensor* dx) {
  if (auto err = check_dense_backward("dense_backward", x, w, y, dy))
    return err;
  auto n = x.dim(0);
  auto in = w.dim(0);
  auto out = w.dim(1);
  ds.resize({n, out});
  dw.resize({in, out});
  db.resize({out});
  if (dx != nullptr)
    dx->resize({n, in});
  matrix_operand xt{x.data(), n, in, true};
  matrix_operand mds{ds.data(), n, out, false};
  matrix_operand wt{w.data(), in, out, true};
  auto team = matmul_team(threads_, n, out, in);
  eigen_team(team, [&](int t, int size) {
    auto rows = split(n, size, t);
    activation_grad(act, y.data() + rows.begin * out,
                    dy.data() + rows.begin * out, ds.data() + rows.begin * out,
                    (rows.end - rows.begin) * out);
#pragma omp barrier
    matmul_block(xt, mds, 1.0f, 0.0f, dw.data(), split(in, size, t),
                 {0, out});
    auto cols = split(out, size, t);
    for (auto o = cols.begin; o < cols.end; ++o) {
      float sum = 0.0f;
      for (int64_t r = 0; r < n; ++r)
        sum += ds[r * out + o];
      db[o] = sum;
    }
    if (dx != nullptr)
      matmul_block(mds, wt, 1.0f, 0.0f, dx->data(), rows, {0, in});
  });
  return caf::none;
}

} // namespace syncfac::cpu
