// The CPU K-FAC kernels and the choice of kernels for a backend.

#include "kernels/kfac_inverter.hpp"

#include "runtime/base/error.hpp"

#ifdef SYNCFAC_HAVE_CUDA
#  include "kernels/cuda/cuda_backend.hpp"
#endif

namespace syncfac {

namespace {

class cpu_inverter final : public kfac_inverter {
public:
  std::string device() const override {
    return "cpu";
  }

  bool concurrent() const override {
    return true;
  }

  caf::error dense_factors(const tensor& input, const tensor& ds,
                           bool with_bias, const factor_sampling& s,
                           int threads, tensor& A, tensor& G) override {
    return cpu::dense_factors(input, ds, with_bias, s, threads, A, G);
  }

  caf::error dense_factors(const tensor& input, const tensor& ds,
                           bool with_bias, const factor_sampling& s,
                           int threads, tensor& A, tensor& G,
                           gram_rows& A_rows,
                           gram_rows& G_rows) override {
    return cpu::dense_factors(input, ds, with_bias, s, threads, A, G, A_rows,
                              G_rows);
  }

  caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                          const tensor& ds, bool with_bias,
                          const factor_sampling& s, int threads,
                          tensor& A, tensor& G) override {
    return cpu::conv_factors(g, x, ds, with_bias, s, threads, A, G);
  }

  caf::error conv_factors(const conv2d_geometry& g, const tensor& x,
                          const tensor& ds, bool with_bias,
                          const factor_sampling& s, int threads,
                          tensor& A, tensor& G, gram_rows& A_rows,
                          gram_rows& G_rows) override {
    return cpu::conv_factors(g, x, ds, with_bias, s, threads, A, G, A_rows,
                             G_rows);
  }

  caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                  float damping,
                                                  int max_retries,
                                                  tensor& lower) override {
    return cpu::damped_cholesky_with_retry(factor, damping, max_retries,
                                           lower);
  }

  caf::expected<float> damped_inverse_with_retry(const tensor& factor,
                                                 float damping,
                                                 int max_retries,
                                                 tensor& inverse) override {
    return cpu::damped_inverse_with_retry(factor, damping, max_retries,
                                          inverse);
  }

  caf::expected<float>
  damped_inverse_f32_with_retry(const tensor& factor, float damping,
                                int max_retries, tensor& inverse) override {
    return cpu::damped_inverse_f32_with_retry(factor, damping, max_retries,
                                              inverse);
  }

  caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                             tensor& eigenvectors) override {
    return cpu::symmetric_eigen(factor, eigenvalues, eigenvectors);
  }

  caf::error precondition_factored(const tensor& grad, const tensor& A_inv,
                                   const tensor& G_inv, float scale,
                                   tensor& out) override {
    return cpu::precondition_factored(grad, A_inv, G_inv, scale, out);
  }

  caf::error precondition_factored_bf16(const tensor& grad,
                                        const tensor& A_inv,
                                        const tensor& G_inv, float scale,
                                        tensor& out) override {
    // The inverses were checked when they were made or installed.
    return cpu::precondition_factored_bf16(grad, A_inv, G_inv, scale, out,
                                           cpu::factor_scan::trusted);
  }

  caf::error precondition_cholesky(const tensor& grad, const tensor& LA,
                                   const tensor& LG, float scale, tensor& out,
                                   cpu::factor_scan scan) override {
    return cpu::precondition_cholesky(grad, LA, LG, scale, out, scan);
  }

  caf::error precondition_eigen(const tensor& grad, const tensor& QA,
                                const tensor& eA, const tensor& QG,
                                const tensor& eG, float lambda,
                                int64_t locations, tensor& out,
                                cpu::factor_scan scan) override {
    return cpu::precondition_eigen(grad, QA, eA, QG, eG, lambda, locations,
                                   out, scan);
  }
};

} // namespace

caf::error kfac_inverter::precondition_factored_bf16(const tensor&,
                                                     const tensor&,
                                                     const tensor&, float,
                                                     tensor&) {
  return make_error(ec::unavailable,
                    "precondition_factored_bf16: bfloat16 products run on "
                    "the CPU only (AMX or AVX512-BF16); device "
                      + in_quotes(device())
                      + " computes them in fp32 (--kfac_precision fp32)");
}

caf::expected<float>
kfac_inverter::damped_inverse_f32_with_retry(const tensor&, float, int,
                                             tensor&) {
  return make_error(ec::unavailable,
                    "damped_inverse_f32_with_retry: float inverses for "
                    "bfloat16 products are the CPU's only; device "
                      + in_quotes(device())
                      + " inverts in double (--kfac_precision fp32)");
}

kfac_inverter& cpu_kfac_inverter() {
  static cpu_inverter instance;
  return instance;
}

caf::expected<std::shared_ptr<kfac_inverter>>
make_kfac_inverter(std::shared_ptr<backend> dev) {
  if (!dev)
    return make_error(ec::invalid_argument,
                      "K-FAC kernels: no backend given");
  auto name = dev->name();
  if (name == "cpu")
    return std::make_shared<cpu_inverter>();
#ifdef SYNCFAC_HAVE_CUDA
  if (auto* kernels = cuda::kfac_of(*dev))
    return std::shared_ptr<kfac_inverter>{
      make_cuda_kfac_inverter(*kernels, name, dev)};
  return make_error(ec::unavailable,
                    "device " + name
                      + ": the backend has no K-FAC kernels "
                        "(expected cpu or a CUDA backend)");
#else
  return make_error(ec::unavailable,
                    "device " + name
                      + ": no K-FAC kernels for this backend "
                        "(this build has no CUDA backend, see docs/cuda.md)");
#endif
}

} // namespace syncfac
