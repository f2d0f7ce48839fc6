// conv2d forward/backward: tiles of whole images run in parallel; each tile
// is zero-padded into a thread-local buffer (small enough for L2) and fed to
// the implicit-GEMM micro-kernels of conv_kernels.cpp.

#include <algorithm>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/checks.hpp"
#include "kernels/cpu/conv_kernels.hpp"
#include "kernels/cpu/conv_plan.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/winograd.hpp"

namespace syncfac::cpu {

namespace {

// The given-ds passes' inputs: those of the forward pass and ds of its
// output's shape.
caf::error check_given_ds(const char* op, const conv2d_geometry& g,
                          const tensor& x, const tensor& w,
                          const tensor& ds) {
  if (auto err = check_conv_inputs(op, g, x, w))
    return err;
  return expect_shape(op, "pre-activation gradient", ds.shape(),
                      "geometry output", g.output_shape());
}

// The tile's input as the micro-kernels read it: padded in the thread's
// buffer, or in place when the geometry needs no padding.
const float* tile_input(const conv2d_geometry& g, const conv_plan& p,
                        const float* x, const tile_span& s, float* buffer) {
  const float* in = x + s.first_image * p.in.size();
  if (!p.needs_padding)
    return in;
  pad_images(in, s.images, p.in, p.padded, g.pad_top, g.pad_left, buffer);
  return buffer;
}

// Where a backward pass's pre-activation gradient comes from: computed per
// tile from y and dy into ds_out while the tile is in cache, or given
// (written by the max-pool after the layer, pool.cpp), when no activation
// pass runs at all.
struct ds_source {
  activation act = activation::identity;
  const float* y = nullptr;
  const float* dy = nullptr;
  float* ds_out = nullptr;
  const float* given = nullptr; // non-null: ds as given

  static ds_source computed(activation act, const tensor& y,
                            const tensor& dy, tensor& ds) {
    return {act, y.data(), dy.data(), ds.data(), nullptr};
  }

  static ds_source from(const tensor& ds) {
    return {activation::identity, nullptr, nullptr, nullptr, ds.data()};
  }

  /// The tile's ds from element `first` on, `n` elements.
  const float* tile(int64_t first, int64_t n) const {
    if (given != nullptr)
      return given + first;
    activation_grad(act, y + first, dy + first, ds_out + first, n);
    return ds_out + first;
  }
};

struct backward_job {
  const conv2d_geometry& g;
  const conv_plan& p;
  const dx_plan& d;
  const winograd_plan& wd; // the input gradient by Winograd, when used
  const winograd_plan& ww; // the weight gradient by Winograd, when used
  conv_workspace& ws;
  const float* x;
  ds_source ds;
  float* dx; // null: no input gradient
};

void input_grad_tile(const backward_job& job, const tile_span& s,
                     const float* ds, size_t thread) {
  const auto& g = job.g;
  const auto& p = job.p;
  float* dx = job.dx + s.first_image * p.in.size();
  if (job.wd.use) {
    winograd_images(job.wd, ds, s.images, job.ws.winograd_u.data(),
                    job.ws.winograd_bias.data(), false, dx,
                    line_start(job.ws.dpadded[thread]),
                    line_start(job.ws.winograd_scratch[thread]));
    return;
  }
  if (job.d.use) {
    const auto& d = job.d;
    float* dsp = line_start(job.ws.dpadded[thread]);
    pad_images(ds, s.images, d.ds, d.padded, d.top, d.left, dsp);
    conv_forward_rows(dsp, d.layout, s.images * d.rows_per_image,
                      job.ws.w_flipped.data(), d.cpad,
                      job.ws.zero_bias.data(), g.in_c, false, dx);
    return;
  }
  float* acc = p.needs_padding ? line_start(job.ws.dpadded[thread]) : dx;
  auto box = p.needs_padding ? p.padded : p.in;
  std::fill(acc, acc + s.images * box.size(), 0.0f);
  conv_input_grad(acc, p.layout, s.rows, ds, g.out_c,
                  job.ws.w_transposed.data(), p.K + wt_row_pad);
  if (p.needs_padding)
    unpad_images(acc, s.images, p.padded, p.in, g.pad_top, g.pad_left, dx);
}

// dw_partial null: ds and dx only (no weight and bias gradients).
// first_in_chunk: the chunk's partials are not written yet (Winograd's dU
// is overwritten, not added to).
void backward_tile(const backward_job& job, int64_t t, int thread,
                   float* dw_partial, float* db_partial, bool first_in_chunk) {
  const auto& g = job.g;
  const auto& p = job.p;
  auto s = tile_of(g, p, t);
  auto O = g.out_c;
  auto idx = static_cast<size_t>(thread);
  const float* ds = job.ds.tile(s.first_row * O, s.rows * O);
  if (dw_partial != nullptr) {
    add_column_sums(ds, s.rows, O, db_partial);
    if (job.ww.use) {
      winograd_dw_images(job.ww, job.x + s.first_image * p.in.size(), ds,
                         s.images, dw_partial, first_in_chunk,
                         line_start(job.ws.padded[idx]),
                         line_start(job.ws.winograd_scratch[idx]));
    } else {
      const float* base
        = tile_input(g, p, job.x, s, line_start(job.ws.padded[idx]));
      conv_weight_grad(base, p.layout, job.ws.tap_offsets.data(), p.K,
                       s.rows, ds, O, dw_partial, p.opad);
    }
  }
  if (job.dx != nullptr)
    input_grad_tile(job, s, ds, idx);
}

// Prepares the workspace of a backward call: offsets, packed kernels and
// thread buffers. ww: the weight gradient's Winograd plan (use false when
// there is none or no weight gradient).
void prepare_backward(const conv2d_geometry& g, conv_plan& p, dx_plan& d,
                      const winograd_plan& wd, const winograd_plan& ww,
                      const float* w, bool with_dx, int threads,
                      conv_workspace& ws) {
  fill_row_offsets(g, p, ws.row_offsets);
  fill_tap_offsets(p, ws.tap_offsets);
  reserve_thread_buffers(ws.padded, threads,
                         p.needs_padding ? p.tile_images * p.padded.size()
                                         : 0);
  if (ww.use) {
    reserve_thread_buffers(ws.padded, threads,
                           p.tile_images * ww.padded.size());
    reserve_thread_buffers(ws.winograd_scratch, threads,
                           winograd_scratch_floats(ww.layout, ww.block));
  }
  if (!with_dx)
    return;
  if (wd.use) {
    pack_winograd(g, wd, true, w, nullptr, threads, ws.winograd_u,
                  ws.winograd_bias);
    reserve_thread_buffers(ws.dpadded, threads,
                           p.tile_images * wd.padded.size());
    reserve_thread_buffers(ws.winograd_scratch, threads,
                           winograd_scratch_floats(wd.layout, wd.block));
  } else if (d.use) {
    fill_dx_row_offsets(g, p.tile_images, d, ws.dx_row_offsets);
    pack_flipped(g, d, w, ws);
    reserve_thread_buffers(ws.dpadded, threads,
                           p.tile_images * d.padded.size());
  } else {
    pack_transposed(p, g.out_c, w, ws);
    reserve_thread_buffers(ws.dpadded, threads,
                           p.tile_images * p.padded.size());
  }
}

// dw, db and (unless dx is null) dx from ds; the caller checked the
// shapes.
caf::error backward_weights(int threads, conv_workspace& ws,
                            const conv2d_geometry& g, const tensor& x,
                            const tensor& w, const ds_source& ds, tensor& dw,
                            tensor& db, tensor* dx) {
  auto p = make_plan(g);
  auto d = make_dx_plan(g);
  auto wd = make_winograd_dx_plan(g);
  auto ww = make_winograd_dw_plan(g);
  prepare_backward(g, p, d, wd, ww, w.data(), dx != nullptr, threads, ws);
  auto chunks = chunk_count(p, threads);
  // A chunk's partial: dU of Winograd's transformed kernel (which its
  // first tile overwrites: megabytes for 64 channels, never zeroed), or dw
  // itself (zeroed by the chunk, on its thread).
  auto dw_size = ww.use ? winograd_dw_floats(ww) : p.K * p.opad;
  grow_to(ws.dw_partials, chunks * dw_size);
  grow_to(ws.db_partials, chunks * p.opad);
  if (dx != nullptr)
    dx->resize(g.input_shape());
  backward_job job{g,  p,  d,        wd,
                   ww, ws, x.data(), ds,
                   dx != nullptr ? dx->data() : nullptr};
  parallel_for(threads, chunks, [&](int64_t c, int thread) {
    float* dw_partial = ws.dw_partials.data() + c * dw_size;
    float* db_partial = ws.db_partials.data() + c * p.opad;
    if (!ww.use)
      std::fill(dw_partial, dw_partial + dw_size, 0.0f);
    std::fill(db_partial, db_partial + p.opad, 0.0f);
    auto tiles = split(p.tiles, chunks, c);
    for (auto t = tiles.begin; t < tiles.end; ++t)
      backward_tile(job, t, thread, dw_partial, db_partial,
                    t == tiles.begin);
  });
  // Partials summed in chunk order: the same result for any thread count.
  dw.resize(g.kernel_shape());
  db.resize({g.out_c});
  db.fill(0.0f);
  if (ww.use) { // writes every element of dw
    unpack_winograd_dw(g, ww, ws.dw_partials.data(), chunks, threads,
                       ws.winograd_du_sum, dw.data());
  } else {
    dw.fill(0.0f);
    for (int64_t c = 0; c < chunks; ++c) {
      const float* part = ws.dw_partials.data() + c * dw_size;
      for (int64_t k = 0; k < p.K; ++k)
        for (int64_t o = 0; o < g.out_c; ++o)
          dw[k * g.out_c + o] += part[k * p.opad + o];
    }
  }
  for (int64_t c = 0; c < chunks; ++c)
    add_column_sums(ws.db_partials.data() + c * p.opad, 1, g.out_c,
                    db.data());
  return caf::none;
}

// dx only from ds; the caller checked the shapes.
caf::error backward_input(int threads, conv_workspace& ws,
                          const conv2d_geometry& g, const tensor& x,
                          const tensor& w, const ds_source& ds, tensor& dx) {
  auto p = make_plan(g);
  auto d = make_dx_plan(g);
  auto wd = make_winograd_dx_plan(g);
  winograd_plan no_weight_gradient;
  prepare_backward(g, p, d, wd, no_weight_gradient, w.data(), true, threads,
                   ws);
  dx.resize(g.input_shape());
  backward_job job{g,  p,        d,  wd, no_weight_gradient,
                   ws, x.data(), ds, dx.data()};
  parallel_for(threads, p.tiles, [&](int64_t t, int thread) {
    backward_tile(job, t, thread, nullptr, nullptr, false);
  });
  return caf::none;
}

// Whether the forward kernels apply `act` themselves (both paths fuse
// the bias and ReLU into their stores); any other activation is a pass
// over each tile after it, while the tile is still in cache.
bool fused_in_kernel(activation act) {
  return act == activation::relu || act == activation::identity;
}

// The forward pass by Winograd, over the direct path's tiles of images;
// done (where set) after each tile.
void winograd_forward(int threads, conv_workspace& ws,
                      const conv2d_geometry& g, const conv_plan& p,
                      const winograd_plan& wp, const tensor& x,
                      const tensor& w, const tensor& b, activation act,
                      tensor& y, const images_done& done) {
  pack_winograd(g, wp, false, w.data(), b.data(), threads, ws.winograd_u,
                ws.winograd_bias);
  reserve_thread_buffers(ws.padded, threads,
                         p.tile_images * wp.padded.size());
  reserve_thread_buffers(ws.winograd_scratch, threads,
                         winograd_scratch_floats(wp.layout, wp.block));
  bool fused = fused_in_kernel(act);
  parallel_for(threads, p.tiles, [&](int64_t t, int thread) {
    auto s = tile_of(g, p, t);
    auto idx = static_cast<size_t>(thread);
    float* out = y.data() + s.first_row * g.out_c;
    winograd_images(wp, x.data() + s.first_image * p.in.size(), s.images,
                    ws.winograd_u.data(), ws.winograd_bias.data(),
                    act == activation::relu, out, line_start(ws.padded[idx]),
                    line_start(ws.winograd_scratch[idx]));
    if (!fused) // while the tile is still in cache
      apply_activation(act, out, s.rows * g.out_c);
    if (done)
      done(s.first_image, s.images);
  });
}

} // namespace

caf::error cpu_backend::conv2d_forward(const conv2d_geometry& g,
                                       const tensor& x, const tensor& w,
                                       const tensor& b, activation act,
                                       tensor& y) {
  const char* op = "conv2d_forward";
  if (auto err = check_conv_forward(op, g, x, w, b))
    return err;
  y.resize(g.output_shape());
  conv2d_forward_tiles(g, x, w, b, act, y, {});
  return caf::none;
}

void cpu_backend::conv2d_forward_tiles(const conv2d_geometry& g,
                                       const tensor& x, const tensor& w,
                                       const tensor& b, activation act,
                                       tensor& y, const images_done& done) {
  auto p = make_plan(g);
  bool fused = fused_in_kernel(act);
  auto wp = make_winograd_plan(g);
  if (wp.use)
    return winograd_forward(threads_, conv_, g, p, wp, x, w, b, act, y, done);
  pack_forward(p, g.out_c, w.data(), b.data(), conv_);
  fill_row_offsets(g, p, conv_.row_offsets);
  reserve_thread_buffers(conv_.padded, threads_,
                         p.needs_padding ? p.tile_images * p.padded.size()
                                         : 0);
  parallel_for(threads_, p.tiles, [&](int64_t t, int thread) {
    auto s = tile_of(g, p, t);
    const float* base
      = tile_input(g, p, x.data(), s,
                   line_start(conv_.padded[static_cast<size_t>(thread)]));
    float* out = y.data() + s.first_row * g.out_c;
    conv_forward_rows(base, p.layout, s.rows, conv_.w_packed.data(), p.opad,
                      conv_.bias.data(), g.out_c, act == activation::relu,
                      out);
    if (!fused) // while the tile is still in cache
      apply_activation(act, out, s.rows * g.out_c);
    if (done)
      done(s.first_image, s.images);
  });
}

caf::error cpu_backend::conv2d_backward(const conv2d_geometry& g,
                                        const tensor& x, const tensor& w,
                                        const tensor& y, const tensor& dy,
                                        activation act, tensor& ds,
                                        tensor& dw, tensor& db, tensor* dx) {
  if (auto err = check_conv_backward("conv2d_backward", g, x, w, y, dy))
    return err;
  ds.resize(g.output_shape());
  return backward_weights(threads_, conv_, g, x, w, ds_source::computed(act, y, dy, ds), dw,
                          db, dx);
}

caf::error cpu_backend::conv2d_backward_from_ds(const conv2d_geometry& g,
                                                const tensor& x,
                                                const tensor& w,
                                                const tensor& ds, tensor& dw,
                                                tensor& db, tensor* dx) {
  if (auto err = check_given_ds("conv2d_backward_from_ds", g, x, w, ds))
    return err;
  return backward_weights(threads_, conv_, g, x, w, ds_source::from(ds), dw, db, dx);
}

caf::error cpu_backend::conv2d_backward_data(const conv2d_geometry& g,
                                             const tensor& x, const tensor& w,
                                             const tensor& y,
                                             const tensor& dy, activation act,
                                             tensor& ds, tensor* dx) {
  const char* op = "conv2d_backward_data";
  if (auto err = check_conv_backward(op, g, x, w, y, dy))
    return err;
  ds.resize(g.output_shape());
  if (dx == nullptr) { // elementwise only
    for_row_parts(threads_, ds.size(), 1, [&](range r) {
      activation_grad(act, y.data() + r.begin, dy.data() + r.begin,
                      ds.data() + r.begin, r.end - r.begin);
    });
    return caf::none;
  }
  return backward_input(threads_, conv_, g, x, w, ds_source::computed(act, y, dy, ds), *dx);
}

caf::error cpu_backend::conv2d_backward_data_from_ds(const conv2d_geometry& g,
                                                     const tensor& x,
                                                     const tensor& w,
                                                     const tensor& ds,
                                                     tensor* dx) {
  if (auto err = check_given_ds("conv2d_backward_data_from_ds", g, x, w, ds))
    return err;
  if (dx == nullptr) // ds is all there is, and it is given
    return caf::none;
  return backward_input(threads_, conv_, g, x, w, ds_source::from(ds), *dx);
}

} // namespace syncfac::cpu
