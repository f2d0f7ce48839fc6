// The CPU K-FAC inverter and the choice of inverter for a backend.

#include "kernels/kfac_inverter.hpp"

#include "kernels/cpu/kfac_inverse.hpp"
#include "runtime/error.hpp"

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

  caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                  float damping,
                                                  int max_retries,
                                                  tensor& lower) override {
    return cpu::damped_cholesky_with_retry(factor, damping, max_retries,
                                           lower);
  }

  caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                             tensor& eigenvectors) override {
    return cpu::symmetric_eigen(factor, eigenvalues, eigenvectors);
  }
};

} // namespace

kfac_inverter& cpu_kfac_inverter() {
  static cpu_inverter instance;
  return instance;
}

caf::expected<std::shared_ptr<kfac_inverter>>
make_kfac_inverter(std::shared_ptr<backend> dev) {
  if (!dev)
    return make_error(ec::invalid_argument,
                      "K-FAC inverter: no backend given");
  auto name = dev->name();
  if (name == "cpu")
    return std::make_shared<cpu_inverter>();
#ifdef SYNCFAC_HAVE_CUDA
  if (auto* kernels = cuda::kfac_of(*dev))
    return std::shared_ptr<kfac_inverter>{
      make_cuda_kfac_inverter(*kernels, name, dev)};
  return make_error(ec::unavailable,
                    "device " + name
                      + ": the backend has no K-FAC inversion kernels "
                        "(expected cpu or a CUDA backend)");
#else
  return make_error(ec::unavailable,
                    "device " + name
                      + ": no K-FAC inversion kernels for this backend "
                        "(this build has no CUDA backend, see docs/cuda.md)");
#endif
}

} // namespace syncfac
