#include "runtime/model_fit.hpp"

#include <algorithm>

#include "runtime/base/error.hpp"
#include "runtime/model.hpp"

namespace syncfac {

caf::error check_data_fits(const model_spec& spec, const dataset& data) {
  // The built model knows its classes (the last layer's width).
  auto built = model::make(spec, 0);
  if (!built)
    return built.error();
  const auto& resolved = (*built)->spec();
  auto name = "model '" + (*built)->description().name + "'";
  tensor_shape input{resolved.height, resolved.width, resolved.channels};
  tensor_shape examples{data.height, data.width, data.channels};
  if (input != examples)
    return make_error(ec::invalid_config,
                      name + " takes inputs " + to_string(input) + " but the data "
                        + in_quotes(data.source) + " holds examples of "
                        + to_string(examples));
  const auto& first = (*built)->description().layers.front();
  if (first.type == layer_type::embedding_bag) {
    // Every index must be a row of the table (or -1, padding), before any
    // worker trips over it in the middle of a step.
    auto per = data.example_size();
    for (int64_t i = 0; i < data.element_count(); ++i) {
      float v = data.float_inputs() ? data.value_data()[i]
                                    : data.pixel_data()[i];
      if (v < 0)
        continue;
      if (v >= static_cast<float>(first.vocabulary)
          || v != static_cast<float>(static_cast<int64_t>(v)))
        return make_error(ec::invalid_config,
                          name + ": index " + std::to_string(v)
                            + " of example " + std::to_string(i / per)
                            + " in the data " + in_quotes(data.source)
                            + " is outside the embedding_bag's vocabulary "
                              "of "
                            + std::to_string(first.vocabulary));
    }
  }
  if (spec.reconstructs() || data.labels.empty())
    return caf::none;
  auto top = *std::max_element(data.labels.begin(), data.labels.end());
  if (top >= resolved.num_classes)
    return make_error(ec::invalid_config,
                      name + " has " + std::to_string(resolved.num_classes)
                        + " classes but the data " + in_quotes(data.source)
                        + " has label "
                        + std::to_string(top));
  return caf::none;
}

npz_inputs npz_inputs_for(const model_spec& spec) {
  auto desc = builtin_description(spec);
  return !desc.layers.empty()
             && desc.layers.front().type == layer_type::embedding_bag
           ? npz_inputs::indices
           : npz_inputs::pixels;
}

} // namespace syncfac
