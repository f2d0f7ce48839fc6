// The backend interface's default compositions (kernels/backend.hpp): the
// fused entry points built from the plain virtuals, so that a backend
// without kernels of its own for them (CUDA today) computes the same
// values, only with the extra passes the fused CPU kernels avoid.

#include "kernels/backend.hpp"
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

} // namespace syncfac
