// cuda::kfac_kernels as a kfac_inverter: host code only, built in every
// build (the CUDA suites' CPU self-checks drive it without CUDA).
//
// Two variants the runtime uses have no GPU kernel of their own:
// - The statistics with rows (layer_stats::a_rows): the rows of a factor
//   are gathered on the host, where the caller wants them. When both
//   factors are matrices, the GPU computes them; when one is rows, the
//   other (a matrix no wider than the m rows, so small) comes from the CPU
//   with it, since the GPU kernels compute A and G together and one of
//   them alone would need a new cuda_backend kernel.
// - cpu::factor_scan::trusted: the GPU kernels always scan their inputs
//   for NaN or Inf on the host. For trusted (checked, finite) factors the
//   result is the same; the scan costs one host pass over the factors,
//   less than the copy to the device that the GPU kernels make anyway.

#include "kernels/kfac_inverter.hpp"

#include <utility>

#include "kernels/cuda/cuda_backend.hpp"

namespace syncfac {

namespace {

/// Whether both factors come as matrices: at least as many rows as
/// columns (cpu::dense_factors' rule for its rows outputs).
bool both_matrices(int64_t rows, int64_t a_width, int64_t g_width) {
  return rows >= a_width && rows >= g_width;
}

class cuda_inverter final : public kfac_inverter {
public:
  cuda_inverter(cuda::kfac_kernels& kernels, std::string device,
                std::shared_ptr<void> owner)
    : kernels_(kernels), device_(std::move(device)), owner_(std::move(owner)) {
    // nop
  }

  std::string device() const override {
    return device_;
  }

  bool concurrent() const override {
    return false; // one stream and one set of device buffers
  }

  caf::error dense_factors(const tensor& input, const tensor& ds,
                           bool with_bias, const factor_sampling& s,
                           int threads, tensor& A, tensor& G) override {
    return kernels_.dense_factors(input, ds, with_bias, s, threads, A, G);
  }

  caf::error dense_factors(const tensor& input, const tensor& ds,
                           bool with_bias, const factor_sampling& s,
                           int threads, tensor& A, tensor& G,
                           gram_rows& A_rows,
                           gram_rows& G_rows) override {
    // Malformed shapes go to the GPU kernels, which report them.
    if (input.rank() != 2 || ds.rank() != 2
        || both_matrices(cpu::sampled_row_count(s, input.dim(0), 1),
                         input.dim(1) + (with_bias ? 1 : 0), ds.dim(1)))
      return matrices_only(
        kernels_.dense_factors(input, ds, with_bias, s, threads, A, G),
        A_rows, G_rows);
    return cpu::dense_factors(input, ds, with_bias, s, threads, A, G, A_rows,
                              G_rows);
  }

  caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                          const tensor& ds, bool with_bias,
                          const factor_sampling& s, int threads,
                          tensor& A, tensor& G) override {
    return kernels_.conv_factors(g, x, ds, with_bias, s, threads, A, G);
  }

  caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                          const tensor& ds, bool with_bias,
                          const factor_sampling& s, int threads,
                          tensor& A, tensor& G, gram_rows& A_rows,
                          gram_rows& G_rows) override {
    if (both_matrices(cpu::sampled_row_count(s, g.batch, g.locations()),
                      g.patch_size() + (with_bias ? 1 : 0), g.out_c))
      return matrices_only(
        kernels_.conv_factors(g, x, ds, with_bias, s, threads, A, G), A_rows,
        G_rows);
    return cpu::conv_factors(g, x, ds, with_bias, s, threads, A, G, A_rows,
                             G_rows);
  }

  caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                  float damping,
                                                  int max_retries,
                                                  tensor& lower) override {
    return kernels_.damped_cholesky_with_retry(factor, damping, max_retries,
                                               lower);
  }

  caf::expected<float> damped_inverse_with_retry(const tensor& factor,
                                                 float damping,
                                                 int max_retries,
                                                 tensor& inverse) override {
    return kernels_.damped_inverse_with_retry(factor, damping, max_retries,
                                              inverse);
  }

  caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                             tensor& eigenvectors) override {
    return kernels_.symmetric_eigen(factor, eigenvalues, eigenvectors);
  }

  caf::error precondition_factored(const tensor& grad, const tensor& A_inv,
                                   const tensor& G_inv, float scale,
                                   tensor& out) override {
    return kernels_.precondition_factored(grad, A_inv, G_inv, scale, out);
  }

  caf::error precondition_cholesky(const tensor& grad, const tensor& LA,
                                   const tensor& LG, float scale, tensor& out,
                                   cpu::factor_scan) override {
    // Scans even trusted factors (see the top of this file).
    return kernels_.precondition_cholesky(grad, LA, LG, scale, out);
  }

  caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                                const tensor& eA, const tensor& QG,
                                const tensor& eG, float lambda,
                                int64_t locations, tensor& out,
                                cpu::factor_scan) override {
    // Scans even trusted factors (see the top of this file).
    return kernels_.precondition_eigen(grad, QA, eA, QG, eG, lambda,
                                       locations, out);
  }

private:
  /// After the matrices came from the GPU: no rows, as cpu::dense_factors
  /// leaves them for factors that come as matrices; untouched on error.
  static caf::error matrices_only(caf::error err, gram_rows& A_rows,
                                  gram_rows& G_rows) {
    if (err)
      return err;
    A_rows = gram_rows{};
    G_rows = gram_rows{};
    return caf::none;
  }

  cuda::kfac_kernels& kernels_;
  std::string device_;
  /// Keeps the backend the kernels belong to alive.
  std::shared_ptr<void> owner_;
};

} // namespace

std::unique_ptr<kfac_inverter>
make_cuda_kfac_inverter(cuda::kfac_kernels& kernels, std::string device,
                        std::shared_ptr<void> owner) {
  return std::make_unique<cuda_inverter>(kernels, std::move(device),
                                         std::move(owner));
}

} // namespace syncfac
