#include "runtime/model_fit.hpp"

#include <algorithm>

#include "runtime/error.hpp"
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

} // namespace syncfac
