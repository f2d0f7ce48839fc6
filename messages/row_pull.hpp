#pragma once

// Pulls of an embedding table's rows instead of the whole table. A batch of
// a model whose first layer is embedding_bag reads only the rows its bags
// name (docs/models.md), so a worker that knows its next batch asks each
// shard only for those rows of the table, and for every dense variable
// whole as before (docs/protocol.md, "Row pulls"). The rows travel as a
// sparse_update (row ids plus the rows as one tensor, a raw byte block on
// the wire); the worker writes them into its copy of the table, whose
// other rows its next batch does not read.
//
// Pure logic, no actors: what the batch looks up, the shard's gather and
// the worker's scatter, each checked and tested on its own
// (tests/messages/row_pull.cpp).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "kernels/tensor.hpp"
#include "messages/sync_messages.hpp"
#include "runtime/inspect.hpp"
#include "runtime/model_description.hpp"
#include "runtime/named_tensor.hpp"

namespace syncfac {

/// The rows of a sparse variable a pull asks for: ids strictly increasing,
/// each in [0, the table's rows). An empty list asks for no row of it.
struct row_request {
  std::string variable;
  std::vector<int64_t> rows;
};

SYNCFAC_INSPECT(row_request, x.variable, x.rows)

/// The table an embedding_bag first layer of `desc` looks up
/// ("emb0/embeddings"), or none for a model without one.
std::optional<std::string> looked_up_table(const model_description& desc);

/// The rows the bags of `inputs` look up (every value of every example is
/// a row id, a negative one padding, as embedding_bag reads them): sorted,
/// each once. A value that is no row id (not an integer) is left out: the
/// device refuses the batch naming it anyway.
std::vector<int64_t> rows_looked_up(const tensor& inputs);

/// ec::invalid_argument unless every id of `rows` is a row of a table of
/// `table_rows` rows and the ids are strictly increasing; names the
/// variable, the id and the table's rows.
caf::error check_row_ids(const std::string& variable,
                         const std::vector<int64_t>& rows,
                         int64_t table_rows);

/// Rows `rows` of `table` (rank >= 1) as a sparse_update, or
/// ec::invalid_argument naming the variable, the id and the table's rows
/// (an id out of range, or ids not strictly increasing).
caf::expected<sparse_update> gather_rows(const named_tensor& table,
                                         const std::vector<int64_t>& rows);

/// Writes the rows of `update` into `table` (the worker's copy of the
/// variable), or an error naming the variable and what does not fit (an id
/// out of range or out of order, rows of another shape); `table` is left
/// as it was on an error.
caf::error scatter_rows(const sparse_update& update, tensor& table);

/// Payload bytes of rows on the wire: the ids and the rows' floats.
int64_t payload_bytes(const sparse_update& update);

} // namespace syncfac
