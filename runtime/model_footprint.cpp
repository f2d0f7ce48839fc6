#include "runtime/model_footprint.hpp"

#include <algorithm>
#include <vector>

#include "runtime/base/error.hpp"
#include "runtime/host_limits.hpp"

namespace syncfac {

namespace {

constexpr uint64_t float_bytes = 4;
constexpr uint64_t max_count = uint64_t{1} << 62;

/// Counts with the layer that makes them: the first product past 2^62 is
/// kept as the error naming its factors, and every later count is 0.
class counter {
public:
  explicit counter(std::string where) : where_(std::move(where)) {
  }

  uint64_t mul(uint64_t x, uint64_t y, const char* what) {
    uint64_t out;
    if (!err_ && (__builtin_mul_overflow(x, y, &out) || out > max_count))
      err_ = make_error(ec::invalid_config,
                        where_ + ": " + what + " = " + std::to_string(x)
                          + " x " + std::to_string(y)
                          + " is more than 2^62 elements");
    return err_ ? 0 : out;
  }

  uint64_t add(uint64_t x, uint64_t y, const char* what) {
    if (!err_ && x + y > max_count) // both <= 2^62: no wrap
      err_ = make_error(ec::invalid_config,
                        where_ + ": " + what + " is more than 2^62 elements");
    return err_ ? 0 : x + y;
  }

  /// The first count that did not fit, if any.
  caf::error error() const {
    return err_;
  }

private:
  std::string where_;
  caf::error err_;
};

/// TensorFlow's window output size (kernels/geometry.hpp) without its
/// products: 0 when a VALID window does not fit (model::make names that).
uint64_t window_out(uint64_t in, uint64_t k, uint64_t stride, padding pad) {
  if (pad == padding::same)
    return (in + stride - 1) / stride;
  if (k > in)
    return 0;
  return (in - k + 1 + stride - 1) / stride;
}

/// One layer's counts.
struct layer_counts {
  uint64_t params = 0;
  uint64_t outputs = 0;
  uint64_t factors = 0;
};

/// A dense or conv2d layer's weights [inputs, units] and biases [units],
/// and K-FAC's factors (inputs + 1)^2 + units^2, which count only under
/// K-FAC: they saturate rather than refuse a model another optimizer
/// trains.
layer_counts weighted(counter& count, uint64_t inputs, uint64_t units) {
  layer_counts out;
  out.params = count.add(count.mul(inputs, units, "inputs x units"), units,
                         "weights + biases");
  out.factors = saturating_add(saturating_mul(inputs + 1, inputs + 1),
                               saturating_mul(units, units));
  return out;
}

} // namespace

caf::expected<model_footprint> measure_model(const model_description& desc,
                                             const std::string& source) {
  model_footprint fp;
  auto image = desc.image_shape();
  if (image.size() != 3
      || std::any_of(image.begin(), image.end(),
                     [](int64_t d) { return d < 1; }))
    return fp; // check_fields names it
  auto names = layer_names(desc);
  auto inputs = resolve_inputs(desc, names, source);
  if (!inputs)
    return fp; // check_fields names it
  // One example's output of every layer: [h, w, c], or [c] when flat
  // (after flatten, dense or embedding_bag); an activation layer's is the
  // layer's it is fused into.
  struct dims {
    uint64_t h = 0, w = 0, c = 0;
    bool flat = false;
  };
  counter input{source + ": input_shape"};
  dims model_input{static_cast<uint64_t>(image[0]),
                   static_cast<uint64_t>(image[1]),
                   static_cast<uint64_t>(image[2]), false};
  fp.activations_per_example = input.mul(input.mul(model_input.h,
                                                   model_input.w,
                                                   "height x width"),
                                         model_input.c,
                                         "height x width x channels");
  if (auto err = input.error())
    return err;
  std::vector<dims> out_of(desc.layers.size());
  counter total{source};
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    const auto& l = desc.layers[i];
    if (l.type == layer_type::activation) {
      // Fused into the layer before it (the model's input when it comes
      // first): owns nothing and adds no output of its own.
      out_of[i] = i == 0 ? model_input : out_of[i - 1];
      continue;
    }
    const auto& from = (*inputs)[i];
    auto in = from.front() < 0 ? model_input
                               : out_of[static_cast<size_t>(from.front())];
    auto label = layer_label(desc, names, i);
    counter count{source + ": " + label};
    layer_counts n;
    auto units = static_cast<uint64_t>(std::max<int64_t>(l.units, 0));
    auto kernel = static_cast<uint64_t>(std::max<int64_t>(l.kernel, 1));
    auto stride = static_cast<uint64_t>(std::max<int64_t>(l.stride, 1));
    auto h = in.h, w = in.w, c = in.c;
    bool flat = in.flat;
    switch (l.type) {
      case layer_type::dense:
        if (!flat)
          return fp; // does not chain: model::make says so
        n = weighted(count, c, units);
        n.outputs = c = units;
        break;
      case layer_type::conv2d:
      case layer_type::max_pool:
      case layer_type::avg_pool: {
        auto out_h = window_out(h, kernel, stride, l.pad);
        auto out_w = window_out(w, kernel, stride, l.pad);
        if (flat || out_h == 0 || out_w == 0)
          return fp;
        auto out_c = c;
        if (l.type == layer_type::conv2d) {
          auto patch = count.mul(count.mul(kernel, kernel, "kernel x kernel"),
                                 c, "kernel x kernel x channels");
          n = weighted(count, patch, units);
          out_c = units;
        }
        n.outputs = count.mul(count.mul(out_h, out_w,
                                        "output height x width"),
                              out_c, "output elements");
        h = out_h;
        w = out_w;
        c = out_c;
        break;
      }
      case layer_type::flatten: // a view: no output of its own
        c = count.mul(count.mul(h, w, "height x width"), c, "features");
        h = w = 1;
        flat = true;
        break;
      case layer_type::embedding_bag:
        n.params = count.mul(static_cast<uint64_t>(
                               std::max<int64_t>(l.vocabulary, 0)),
                             units, "vocabulary x units");
        n.outputs = c = units;
        h = w = 1;
        flat = true;
        break;
      case layer_type::add:
      case layer_type::concat:
        // add: the inputs' shape (model::make checks they agree); concat:
        // their last axes summed.
        if (l.type == layer_type::concat)
          for (size_t k = 1; k < from.size(); ++k) {
            auto other = from[k] < 0 ? model_input
                                     : out_of[static_cast<size_t>(from[k])];
            c = count.add(c, other.c, "the joined width");
          }
        n.outputs = flat ? c
                         : count.mul(count.mul(h, w, "height x width"), c,
                                     "output elements");
        break;
      case layer_type::global_avg_pool:
        if (flat)
          return fp; // does not chain: model::make says so
        n.outputs = c;
        h = w = 1;
        flat = true;
        break;
      case layer_type::batch_norm:
        // gamma, beta and the two moving statistics per channel.
        n.params = count.mul(4, c, "4 x channels");
        [[fallthrough]];
      case layer_type::dropout: // an output and (dropout) a mask per input
        n.outputs = flat ? c
                         : count.mul(count.mul(h, w, "height x width"), c,
                                     "output elements");
        break;
      case layer_type::activation: break;
    }
    out_of[i] = dims{h, w, c, flat};
    if (auto err = count.error())
      return err;
    fp.parameters = total.add(fp.parameters, n.params,
                              "the parameters in all");
    fp.activations_per_example = total.add(fp.activations_per_example,
                                           n.outputs,
                                           "the activations in all");
    if (auto err = total.error())
      return err;
    fp.factor_elements = saturating_add(fp.factor_elements, n.factors);
    if (n.params > fp.largest_parameters) {
      fp.largest_parameters = n.params;
      fp.largest_layer = label;
    }
  }
  return fp;
}

uint64_t run_bytes(const model_footprint& fp, uint64_t replicas,
                   uint64_t batch, bool kfac) {
  // A replica: values, gradients, one optimizer slot; the activations and
  // their gradients for its batch.
  auto replica = saturating_add(
    saturating_mul(fp.parameters, 3 * float_bytes),
    saturating_mul(saturating_mul(fp.activations_per_example, batch),
                   2 * float_bytes));
  // The PS: values, moving average, two optimizer slots (Adam's).
  auto ps = saturating_mul(fp.parameters, 4 * float_bytes);
  auto total = saturating_add(saturating_mul(replica, replicas), ps);
  if (kfac)
    total = saturating_add(total,
                           saturating_mul(fp.factor_elements, 3 * float_bytes));
  return total;
}

uint64_t build_bytes(const model_footprint& fp) {
  return saturating_add(saturating_mul(fp.parameters, float_bytes),
                        saturating_mul(fp.largest_parameters,
                                       2 * float_bytes));
}

caf::error check_model_buildable(const model_description& desc,
                                 const std::string& source) {
  auto fp = measure_model(desc, source);
  if (!fp)
    return fp.error();
  auto what = source + ": building its " + std::to_string(fp->parameters)
              + " parameters (" + fp->largest_layer + " holds "
              + std::to_string(fp->largest_parameters) + ")";
  return check_memory(build_bytes(*fp), what, usable_memory());
}

caf::error check_local_run(const model_spec& spec, uint64_t replicas,
                           uint64_t batch, bool kfac,
                           uint64_t compute_threads,
                           const std::string& replicas_flag) {
  auto desc = builtin_description(spec);
  auto source = "model '" + desc.name + "'";
  auto fp = measure_model(desc, source);
  if (!fp)
    return fp.error();
  // A device actor is a thread of its own (CAF's detached actors), and
  // each thread reserves its stack.
  auto threads = saturating_add(replicas, compute_threads);
  auto threads_left = usable_threads();
  if (threads > threads_left.amount)
    return make_error(ec::invalid_config,
                      replicas_flag + ": the run starts "
                        + std::to_string(threads) + " threads ("
                        + std::to_string(replicas) + " device actors and "
                        + std::to_string(compute_threads)
                        + " compute threads), more than the "
                        + std::to_string(threads_left.amount)
                        + " this process may start (" + threads_left.source
                        + ")");
  constexpr uint64_t stack_bytes = uint64_t{8} << 20;
  auto need = saturating_add(run_bytes(*fp, replicas, batch, kfac),
                             saturating_mul(threads, stack_bytes));
  return check_memory(need,
                      replicas_flag + " with " + source + " ("
                        + std::to_string(fp->parameters) + " parameters, "
                        + std::to_string(fp->activations_per_example)
                        + " activations per example, batch "
                        + std::to_string(batch) + ")",
                      usable_memory());
}

} // namespace syncfac
