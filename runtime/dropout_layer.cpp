// dropout (runtime/layers.hpp): inverted dropout, the mask drawn from a
// counter-based hash of the pass's noise seed and the element's index, so
// a mask needs no generator state: the same seed gives the same mask on
// any machine, thread count or resumed run (pass_mode::noise_seed).

#include <cstdint>

#include "runtime/base/error.hpp"
#include "runtime/layer_prefix.hpp"
#include "runtime/layers.hpp"

namespace syncfac {

namespace {

/// SplitMix64's finaliser: a bijection that mixes every input bit into
/// every output bit.
uint64_t mix(uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class dropout_layer : public layer {
public:
  dropout_layer(std::string name, double rate)
    : layer(std::move(name)), rate_(rate) {
  }

  caf::expected<tensor_shape>
  output_shape(const tensor_shape& input) const override {
    return input;
  }

  void begin_pass(const pass_mode& mode) override {
    mode_ = mode;
  }

  caf::error forward(backend& dev, const tensor& x) override {
    dropping_ = mode_.training && rate_ > 0;
    if (!dropping_)
      return dev.reshape_copy(x, x.shape(), y_);
    mask_.resize(x.shape());
    // An element is kept when its 24-bit uniform draw is at least rate:
    // probability 1 - rate up to 2^-24.
    const auto threshold = static_cast<uint64_t>(rate_ * (1 << 24));
    const auto keep = static_cast<float>(1.0 / (1.0 - rate_));
    const auto base = mix(mode_.noise_seed);
    float* m = mask_.data();
    for (int64_t i = 0; i < mask_.size(); ++i) {
      auto draw = mix(base + static_cast<uint64_t>(i)) >> 40;
      m[i] = draw >= threshold ? keep : 0.0f;
    }
    return dev.multiply(x, mask_, y_);
  }

  const tensor& output() const noexcept override {
    return y_;
  }

  caf::error backward(backend& dev, const tensor& dy, tensor* dx) override {
    if (dx == nullptr)
      return caf::none;
    if (dy.shape() != y_.shape())
      return make_error(ec::shape_mismatch,
                        name() + ": gradient " + dy.shape_string()
                          + " does not fit output " + y_.shape_string());
    if (!dropping_)
      return dev.reshape_copy(dy, dy.shape(), *dx);
    return dev.multiply(dy, mask_, *dx);
  }

  caf::error adopt_prefix(const layer& source, const tensor& x,
                          int64_t n) override {
    auto src = prefix_source<dropout_layer>(*this, source, x, n);
    if (!src)
      return src.error();
    dropping_ = (*src)->dropping_;
    copy_prefix((*src)->y_, n, y_);
    if (dropping_)
      copy_prefix((*src)->mask_, n, mask_);
    return caf::none;
  }

private:
  double rate_;
  pass_mode mode_;
  /// Whether the last forward dropped (training with rate > 0).
  bool dropping_ = false;
  /// 0 or 1 / (1 - rate) per element of the last training forward.
  tensor mask_;
  tensor y_;
};

} // namespace

layer_ptr make_dropout_layer(std::string name, double rate) {
  return std::make_unique<dropout_layer>(std::move(name), rate);
}

} // namespace syncfac
