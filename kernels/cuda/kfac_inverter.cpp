// cuda::kfac_kernels as a kfac_inverter: host code only, built in every
// build (the CUDA suites' CPU self-checks drive it without CUDA).

#include "kernels/kfac_inverter.hpp"

#include <utility>

#include "kernels/cuda/cuda_backend.hpp"

namespace syncfac {

namespace {

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

  caf::expected<float> damped_cholesky_with_retry(const tensor& factor,
                                                  float damping,
                                                  int max_retries,
                                                  tensor& lower) override {
    return kernels_.damped_cholesky_with_retry(factor, damping, max_retries,
                                               lower);
  }

  caf::error symmetric_eigen(const tensor& factor, tensor& eigenvalues,
                             tensor& eigenvectors) override {
    return kernels_.symmetric_eigen(factor, eigenvalues, eigenvectors);
  }

private:
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
