#include "actors/type_registry.hpp"

#include "actors/actors.hpp"
#include "actors/metrics_sink.hpp"
#include "actors/node.hpp"
#include "messages/device_messages.hpp"
#include "messages/row_pull.hpp"
#include "runtime/base/error.hpp"
#include "runtime/optimizer.hpp"
#include "runtime/sync/sparse_accumulator.hpp"

namespace syncfac {

void register_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<tensor>("syncfac::tensor");
  cfg.add_message_type<tensor_shape>("syncfac::tensor_shape");
  cfg.add_message_type<named_tensor>("syncfac::named_tensor");
  cfg.add_message_type<parameter_set>("syncfac::parameter_set");
  cfg.add_message_type<label_vector>("syncfac::label_vector");
  cfg.add_message_type<batch>("syncfac::batch");
  cfg.add_message_type<model_spec>("syncfac::model_spec");
  cfg.add_message_type<model_info>("syncfac::model_info");
  cfg.add_message_type<optimizer_config>("syncfac::optimizer_config");
  cfg.add_message_type<optimizer_slots>("syncfac::optimizer_slots");
  cfg.add_message_type<step_result>("syncfac::step_result");
  cfg.add_message_type<eval_result>("syncfac::eval_result");
  cfg.add_message_type<device_info>("syncfac::device_info");
  cfg.add_message_type<accumulator_stats>("syncfac::accumulator_stats");
  cfg.add_message_type<sparse_update>("syncfac::sparse_update");
  cfg.add_message_type<gradient_push>("syncfac::gradient_push");
  cfg.add_message_type<push_ack>("syncfac::push_ack");
  cfg.add_message_type<shard_params>("syncfac::shard_params");
  cfg.add_message_type<row_request>("syncfac::row_request");
  cfg.add_message_type<std::vector<sparse_update>>("syncfac::sparse_updates");
  cfg.add_message_type<std::vector<row_request>>("syncfac::row_requests");
  cfg.add_message_type<applied>("syncfac::applied");
  cfg.add_message_type<norm_part>("syncfac::norm_part");
  cfg.add_message_type<gradient_scale>("syncfac::gradient_scale");
  cfg.add_message_type<token_grant>("syncfac::token_grant");
  cfg.add_message_type<worker_report>("syncfac::worker_report");
  cfg.add_message_type<shard_status>("syncfac::shard_status");
  cfg.add_message_type<worker_status>("syncfac::worker_status");
  cfg.add_message_type<chief_status>("syncfac::chief_status");
  cfg.add_message_type<sync_summary>("syncfac::sync_summary");
  cfg.add_message_type<kfac_config>("syncfac::kfac_config");
  cfg.add_message_type<kfac_layer>("syncfac::kfac_layer");
  cfg.add_message_type<layer_collection>("syncfac::layer_collection");
  cfg.add_message_type<stats_request>("syncfac::stats_request");
  cfg.add_message_type<layer_stats>("syncfac::layer_stats");
  cfg.add_message_type<stats_update>("syncfac::stats_update");
  cfg.add_message_type<stats_ack>("syncfac::stats_ack");
  cfg.add_message_type<layer_factors>("syncfac::layer_factors");
  cfg.add_message_type<factor_set>("syncfac::factor_set");
  cfg.add_message_type<layer_inverse>("syncfac::layer_inverse");
  cfg.add_message_type<inverse_set>("syncfac::inverse_set");
  cfg.add_message_type<covariance_status>("syncfac::covariance_status");
  cfg.add_message_type<inverse_status>("syncfac::inverse_status");
  cfg.add_message_type<covariance_actor>("syncfac::covariance_actor");
  cfg.add_message_type<inverse_actor>("syncfac::inverse_actor");
  cfg.add_message_type<ps_actor>("syncfac::ps_actor");
  cfg.add_message_type<chief_actor>("syncfac::chief_actor");
  cfg.add_message_type<worker_actor>("syncfac::worker_actor");
  cfg.add_message_type<sparse_gradient>("syncfac::sparse_gradient");
  cfg.add_message_type<device_actor>("syncfac::device_actor");
  cfg.add_message_type<shard_snapshot>("syncfac::shard_snapshot");
  cfg.add_message_type<covariance_snapshot>("syncfac::covariance_snapshot");
  cfg.add_message_type<resume_point>("syncfac::resume_point");
  cfg.add_message_type<batcher_state>("syncfac::batcher_state");
  cfg.add_message_type<checkpoint_contents>("syncfac::checkpoint_contents");
  cfg.add_message_type<checkpoint_written>("syncfac::checkpoint_written");
  cfg.add_message_type<std::vector<covariance_actor>>(
    "syncfac::covariance_actors");
  cfg.add_message_type<node_hello>("syncfac::node_hello");
  cfg.add_message_type<node_info>("syncfac::node_info");
  cfg.add_message_type<node_actor>("syncfac::node_actor");
  cfg.add_message_type<metrics_record>("syncfac::metrics_record");
  cfg.add_message_type<metrics_actor>("syncfac::metrics_actor");
  cfg.add_error_category(error_category,
                         [](uint8_t code, caf::atom_value,
                            const caf::message& context) {
                           return render(caf::error{code, error_category,
                                                    context});
                         });
}

} // namespace syncfac
