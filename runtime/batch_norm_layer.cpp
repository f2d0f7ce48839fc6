// batch_norm (runtime/layers.hpp; docs/models.md, "Batch normalisation"):
// training normalises by the batch's own statistics per channel and
// leaves, in the moving statistics' gradient slots, what moves them
// towards the batch's (runtime/moving_statistic.hpp); evaluation
// normalises by the moving statistics. The kernels are the backend's
// batch_norm_statistics, batch_norm_forward and batch_norm_backward.

#include <cmath>

#include "runtime/base/error.hpp"
#include "runtime/layer_prefix.hpp"
#include "runtime/layers.hpp"
#include "runtime/moving_statistic.hpp"

namespace syncfac {

namespace {

class batch_norm_layer : public layer {
public:
  batch_norm_layer(std::string name, int64_t channels, double momentum,
                   double epsilon, activation act)
    : layer(std::move(name)),
      channels_(channels),
      momentum_(momentum),
      epsilon_(epsilon),
      act_(act) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    if (input.size() < 2 || input.back() != channels_)
      return make_error(ec::shape_mismatch,
                        name() + ": input " + to_string(input)
                          + " does not end in the layer's "
                          + std::to_string(channels_) + " channels");
    return input;
  }

  parameter_set make_parameters() const override {
    tensor ones{{channels_}};
    ones.fill(1.0f);
    return {{name() + "/gamma", ones},
            {name() + "/beta", tensor{{channels_}}},
            {name() + std::string{moving_mean_suffix}, tensor{{channels_}}},
            {name() + std::string{moving_variance_suffix}, ones}};
  }

  bool parameters_start_as_made() const override {
    return true;
  }

  void bind(named_tensor* params, named_tensor* grads) override {
    gamma_ = &params[0].value;
    beta_ = &params[1].value;
    moving_mean_ = &params[2].value;
    moving_variance_ = &params[3].value;
    dgamma_ = &grads[0].value;
    dbeta_ = &grads[1].value;
    dmoving_mean_ = &grads[2].value;
    dmoving_variance_ = &grads[3].value;
  }

  void begin_pass(const pass_mode& mode) override {
    training_ = mode.training;
  }

  caf::error forward(backend& dev, const tensor& x) override {
    if (auto shape = output_shape(x.shape()); !shape)
      return shape.error();
    x_ = &x;
    trained_ = training_;
    if (trained_) {
      if (auto err = dev.batch_norm_statistics(x, mean_, variance_))
        return with_context(err, name());
      inverse_std(variance_);
    } else {
      mean_ = *moving_mean_;
      inverse_std(*moving_variance_);
    }
    return dev.batch_norm_forward(x, *gamma_, *beta_, mean_, inv_std_, act_,
                                  y_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (auto err = backward_pass(dev, dy, *dgamma_, *dbeta_, dx))
      return err;
    // The moving statistics' pushes (runtime/moving_statistic.hpp), with
    // the batch's unbiased variance, as TF and PyTorch keep it.
    const auto positions = x_->size() / channels_;
    const double unbias
      = positions > 1 ? static_cast<double>(positions) / (positions - 1) : 1.0;
    const auto share = 1.0 - momentum_;
    dmoving_mean_->resize({channels_});
    dmoving_variance_->resize({channels_});
    for (int64_t k = 0; k < channels_; ++k) {
      (*dmoving_mean_)[k]
        = static_cast<float>(share * ((*moving_mean_)[k] - mean_[k]));
      (*dmoving_variance_)[k] = static_cast<float>(
        share * ((*moving_variance_)[k] - unbias * variance_[k]));
    }
    return caf::none;
  }

  caf::error backward_data(backend& dev, const tensor& dy,
                           tensor* dx) override {
    return backward_pass(dev, dy, scratch_dgamma_, scratch_dbeta_, dx);
  }

  /// The source's whole-batch statistics stay: the first n examples of
  /// its output are normalised by them, and K-FAC's statistics pass, the
  /// one user, differentiates at that point (M in the gradient is then
  /// this prefix's positions, an approximation documented in
  /// docs/models.md).
  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<batch_norm_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    const auto& s = **src;
    x_ = &x;
    trained_ = s.trained_;
    mean_ = s.mean_;
    variance_ = s.variance_;
    inv_std_ = s.inv_std_;
    copy_prefix(s.y_, n, y_);
    return caf::none;
  }

private:
  void inverse_std(const tensor& variance) {
    inv_std_.resize({channels_});
    for (int64_t k = 0; k < channels_; ++k)
      inv_std_[k] = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(variance[k]) + epsilon_));
  }

  caf::error backward_pass(backend& dev, const tensor& dy, tensor& dgamma,
                           tensor& dbeta, tensor* dx) {
    if (x_ == nullptr || !trained_)
      return make_error(ec::invalid_argument,
                        name() + ": backward needs a training forward pass "
                                 "before it (the last was "
                          + std::string{x_ == nullptr ? "none"
                                                      : "an evaluation"}
                          + ")");
    return dev.batch_norm_backward(*x_, *gamma_, mean_, inv_std_, y_, dy,
                                   act_, backward_scratch_, dgamma, dbeta, dx);
  }

  int64_t channels_;
  double momentum_;
  double epsilon_;
  activation act_;
  bool training_ = true;
  /// Whether the last forward normalised by the batch's statistics.
  bool trained_ = false;
  const tensor* x_ = nullptr;
  tensor* gamma_ = nullptr;
  tensor* beta_ = nullptr;
  tensor* moving_mean_ = nullptr;
  tensor* moving_variance_ = nullptr;
  tensor* dgamma_ = nullptr;
  tensor* dbeta_ = nullptr;
  tensor* dmoving_mean_ = nullptr;
  tensor* dmoving_variance_ = nullptr;
  /// The statistics the last forward normalised by, 1 / sqrt(variance +
  /// epsilon), and (training) the batch's biased variance.
  tensor mean_;
  tensor variance_;
  tensor inv_std_;
  tensor y_;
  /// batch_norm_backward's scratch, kept between steps (a GPU backend
  /// holds dy act'(y) in it).
  tensor backward_scratch_;
  tensor scratch_dgamma_;
  tensor scratch_dbeta_;
};

} // namespace

layer_ptr make_batch_norm_layer(std::string name, int64_t channels,
                                double momentum, double epsilon,
                                activation act) {
  return std::make_unique<batch_norm_layer>(std::move(name), channels,
                                            momentum, epsilon, act);
}

} // namespace syncfac
