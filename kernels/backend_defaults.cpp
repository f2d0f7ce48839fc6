// The backend interface's default compositions (kernels/backend.hpp): the
// fused entry points built from the plain virtuals, so that a backend
// without kernels of its own for them (CUDA today) computes the same
// values, only with the extra passes the fused CPU kernels avoid.

#include <algorithm>

#include "kernels/backend.hpp"
#include "kernels/cpu/activation.hpp"
#include "kernels/host_chunks.hpp"
#include "runtime/base/error.hpp"

namespace syncfac {

caf::error backend::conv2d_backward_from_ds(const conv2d_geometry& g,
                                            const tensor& x, const tensor& w,
                                            const tensor& ds, tensor& dw,
                                            tensor& db, tensor* dx) {
  // The identity's gradient copies ds: the backward of that copy is the
  // backward of ds itself.
  tensor ds_copy;
  return conv2d_backward(g, x, w, ds, ds, activation::identity, ds_copy, dw,
                         db, dx);
}

caf::error backend::conv2d_backward_data_from_ds(const conv2d_geometry& g,
                                                 const tensor& x,
                                                 const tensor& w,
                                                 const tensor& ds,
                                                 tensor* dx) {
  tensor ds_copy;
  return conv2d_backward_data(g, x, w, ds, ds, activation::identity, ds_copy,
                              dx);
}

caf::error backend::conv2d_max_pool_forward(
  const conv2d_geometry& conv, const tensor& x, const tensor& w,
  const tensor& b, activation act, const pool2d_geometry& pool,
  tensor& conv_y, tensor& pooled, std::vector<int32_t>& argmax) {
  if (auto err = conv2d_forward(conv, x, w, b, act, conv_y))
    return err;
  return max_pool_forward(pool, conv_y, pooled, argmax);
}

caf::error backend::max_pool_backward_activated(
  const pool2d_geometry& g, const tensor& dy,
  const std::vector<int32_t>& argmax, const tensor& pooled_y, activation act,
  tensor& ds) {
  const char* op = "max_pool_backward_activated";
  if (pooled_y.shape() != g.output_shape())
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": pooled output "
                        + pooled_y.shape_string()
                        + " does not fit geometry output "
                        + to_string(g.output_shape()));
  // dL/dy of the pool's input, checked (argmax inside its images) by
  // max_pool_backward before anything is written.
  tensor input_grad;
  if (auto err = max_pool_backward(g, dy, argmax, input_grad))
    return err;
  if (act == activation::identity)
    return reshape_copy(input_grad, g.input_shape(), ds);
  if (act == activation::relu) {
    // relu' needs only the sign of y: the scatter of pooled_y sums copies
    // of a position's y, positive exactly where y is (0 where nothing
    // won), and stays on the device.
    tensor winners;
    if (auto err = max_pool_backward(g, pooled_y, argmax, winners))
      return err;
    return activation_backward(act, winners, input_grad, ds);
  }
  // tanh and sigmoid need y itself: the pool's input rebuilt on the host,
  // each winner's value at its position and 0 elsewhere, where act'(0)
  // times a zero gradient is zero.
  tensor input(g.input_shape());
  float* values = input.data();
  const float* winners = pooled_y.data(); // a GPU's copy read back
  for (size_t j = 0; j < argmax.size(); ++j)
    values[argmax[j]] = winners[j];
  return activation_backward(act, input, input_grad, ds);
}

void backend::run_host_parts(int64_t parts, int64_t elements,
                             const std::function<void(int64_t)>& f) {
  (void) elements;
  for (int64_t i = 0; i < parts; ++i)
    f(i);
}

namespace {

/// y = xs[0] + xs[1] + ... (two or more), summed in that order over host
/// chunks on the backend's threads, then then_chunk(out, first, last) on
/// each chunk of y (out: y's values) while it is in cache. Elementwise, so y may be an input: each chunk
/// reads its inputs' values before it writes the same positions of y.
/// `op` and `what` name the call and its inputs in errors.
template <class ThenChunk>
caf::error sum_on_host(backend& dev, const char* op, const char* what,
                       const std::vector<const tensor*>& xs, tensor& y,
                       const ThenChunk& then_chunk) {
  if (xs.size() < 2)
    return make_error(ec::invalid_argument,
                      std::string{op} + ": needs two or more " + what
                        + "s, got " + std::to_string(xs.size()));
  const auto& shape = xs[0]->shape();
  for (size_t k = 1; k < xs.size(); ++k)
    if (xs[k]->shape() != shape)
      return make_error(ec::shape_mismatch,
                        std::string{op} + ": " + what + " "
                          + std::to_string(k) + " "
                          + xs[k]->shape_string() + " differs from " + what
                          + " 0 " + xs[0]->shape_string());
  std::vector<const float*> in;
  for (const auto* x : xs)
    in.push_back(x->data());
  const auto n = xs[0]->size();
  const auto chunks = host_chunks::of(n, 1);
  // A copy: `shape` is xs[0]'s own, and y may be xs[0].
  tensor_shape out_shape = shape;
  y.resize(out_shape);
  float* out = y.data();
  dev.run_host_parts(chunks.count, n, [&](int64_t i) {
    auto [first, last] = chunks.range(i);
    if (in.size() == 2) {
      for (int64_t j = first; j < last; ++j)
        out[j] = in[0][j] + in[1][j];
    } else {
      for (int64_t j = first; j < last; ++j) {
        auto sum = in[0][j] + in[1][j];
        for (size_t k = 2; k < in.size(); ++k)
          sum += in[k][j];
        out[j] = sum;
      }
    }
    then_chunk(out, first, last);
  });
  return caf::none;
}

} // namespace

caf::error backend::add_forward(const std::vector<const tensor*>& xs,
                                activation act, tensor& y) {
  return sum_on_host(*this, "add_forward", "input", xs, y,
                     [&](float* out, int64_t first, int64_t last) {
                       if (act != activation::identity)
                         cpu::apply_activation(act, out + first,
                                               last - first);
                     });
}

caf::error backend::activation_backward_sum(
  activation act, const tensor& y, const std::vector<const tensor*>& dys,
  tensor& dx) {
  const char* op = "activation_backward_sum";
  if (dys.empty())
    return make_error(ec::invalid_argument,
                      std::string{op} + ": needs one or more gradient shares");
  if (dys.size() == 1) // the device's own kernel
    return activation_backward(act, y, *dys[0], dx);
  if (dys[0]->shape() != y.shape())
    return make_error(ec::shape_mismatch,
                      std::string{op} + ": gradient share 0 "
                        + dys[0]->shape_string() + " differs from y "
                        + y.shape_string());
  const float* out_y = y.data();
  return sum_on_host(*this, op, "gradient share", dys, dx,
                     [&](float* out, int64_t first, int64_t last) {
                       cpu::activation_grad(act, out_y + first, out + first,
                                            out + first, last - first);
                     });
}

namespace {

/// The last axis of a shape (1 for a scalar) and the count of rows before
/// it.
int64_t last_axis(const tensor_shape& shape) {
  return shape.empty() ? 1 : shape.back();
}

} // namespace

caf::error backend::concat_forward(const std::vector<const tensor*>& xs,
                                   tensor& y) {
  if (xs.empty())
    return make_error(ec::invalid_argument, "concat_forward: no inputs");
  auto shape = xs[0]->shape();
  if (shape.empty())
    return make_error(ec::shape_mismatch,
                      "concat_forward: input 0 is a scalar");
  int64_t width = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const auto& s = xs[k]->shape();
    if (s.size() != shape.size()
        || !std::equal(s.begin(), s.end() - 1, shape.begin()))
      return make_error(ec::shape_mismatch,
                        "concat_forward: input " + std::to_string(k) + " "
                          + xs[k]->shape_string()
                          + " differs from input 0 "
                          + xs[0]->shape_string()
                          + " before the last axis");
    width += last_axis(s);
  }
  shape.back() = width;
  y.resize(shape);
  const auto rows = width > 0 ? y.size() / width : 0;
  float* out = y.data();
  int64_t offset = 0;
  for (const auto* x : xs) {
    const auto w = last_axis(x->shape());
    const float* in = x->data();
    for (int64_t r = 0; r < rows; ++r)
      std::copy(in + r * w, in + (r + 1) * w, out + r * width + offset);
    offset += w;
  }
  return caf::none;
}

caf::error backend::concat_backward(const tensor& dy,
                                    const std::vector<tensor_shape>& shapes,
                                    const std::vector<tensor*>& dxs) {
  if (shapes.size() != dxs.size())
    return make_error(ec::invalid_argument,
                      "concat_backward: " + std::to_string(shapes.size())
                        + " shapes for " + std::to_string(dxs.size())
                        + " gradients");
  int64_t width = 0;
  for (const auto& s : shapes)
    width += last_axis(s);
  if (dy.rank() < 1 || dy.shape().back() != width)
    return make_error(ec::shape_mismatch,
                      "concat_backward: gradient " + dy.shape_string()
                        + " does not end in the inputs' "
                        + std::to_string(width) + " columns");
  const auto rows = width > 0 ? dy.size() / width : 0;
  const float* in = dy.data();
  int64_t offset = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto w = last_axis(shapes[k]);
    if (dxs[k] != nullptr) {
      if (element_count(shapes[k]) != rows * w)
        return make_error(ec::shape_mismatch,
                          "concat_backward: input " + std::to_string(k) + " "
                            + to_string(shapes[k]) + " does not fit "
                            "gradient " + dy.shape_string());
      dxs[k]->resize(shapes[k]);
      float* out = dxs[k]->data();
      for (int64_t r = 0; r < rows; ++r)
        std::copy(in + r * width + offset, in + r * width + offset + w,
                  out + r * w);
    }
    offset += w;
  }
  return caf::none;
}

caf::error backend::multiply(const tensor& x, const tensor& m, tensor& y) {
  if (x.shape() != m.shape())
    return make_error(ec::shape_mismatch,
                      "multiply: " + x.shape_string() + " times "
                        + m.shape_string());
  y.resize(x.shape());
  const float* a = x.data();
  const float* b = m.data();
  float* out = y.data();
  for (int64_t i = 0; i < x.size(); ++i)
    out[i] = a[i] * b[i];
  return caf::none;
}

} // namespace syncfac
