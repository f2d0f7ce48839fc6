#pragma once

// Whether a data set fits a model, checked before training starts: the
// examples' shape against the model's input, the labels against its
// classes (docs/models.md, "Data").

#include <caf/error.hpp>

#include "runtime/data/dataset.hpp"
#include "runtime/model_spec.hpp"

namespace syncfac {

/// ec::invalid_config naming the model, the set (its source) and both
/// shapes, or the largest label and the classes, if `data` cannot train or
/// evaluate the model of `spec`; a reconstructing model ignores labels.
caf::error check_data_fits(const model_spec& spec, const dataset& data);

/// How an .npz file's integer inputs are read for the model of `spec`: as
/// row indices when its first layer is embedding_bag, as pixels otherwise
/// (load_npz).
npz_inputs npz_inputs_for(const model_spec& spec);

} // namespace syncfac
