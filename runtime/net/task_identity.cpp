#include "runtime/net/task_identity.hpp"

#include <filesystem>
#include <memory>
#include <vector>

#include <arpa/inet.h>

#include <caf/settings.hpp>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "runtime/base/error.hpp"
#include "runtime/net/verified_peers.hpp"

namespace syncfac::net {

namespace {

namespace fs = std::filesystem;

constexpr const char* uri_scheme = "syncfac://";
constexpr const char* task_key = "syncfac.tls-task";
constexpr const char* cluster_key = "syncfac.tls-cluster";

struct names_free {
  void operator()(GENERAL_NAMES* p) const noexcept {
    GENERAL_NAMES_free(p);
  }
};

bool is_ip_address(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1
         || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

/// "syncfac://worker/1" -> worker:1.
std::optional<task_id> parse_task_uri(const std::string& uri) {
  std::string scheme = uri_scheme;
  if (uri.compare(0, scheme.size(), scheme) != 0)
    return std::nullopt;
  auto rest = uri.substr(scheme.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos || slash == 0)
    return std::nullopt;
  auto parsed = task_id::parse(rest.substr(0, slash) + ":"
                               + rest.substr(slash + 1));
  if (!parsed)
    return std::nullopt;
  return *parsed;
}

} // namespace

std::string task_uri(const task_id& t) {
  return uri_scheme + t.job + "/" + std::to_string(t.index);
}

caf::expected<task_id> certificate_task(x509_st* cert) {
  if (cert == nullptr)
    return make_error(ec::invalid_config, "no certificate");
  std::unique_ptr<GENERAL_NAMES, names_free> names{
    static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))};
  std::vector<std::string> uris;
  if (names)
    for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
      auto* name = sk_GENERAL_NAME_value(names.get(), i);
      if (name->type != GEN_URI)
        continue;
      const auto* s = name->d.uniformResourceIdentifier;
      std::string uri(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                      static_cast<size_t>(ASN1_STRING_length(s)));
      if (uri.compare(0, std::string{uri_scheme}.size(), uri_scheme) == 0)
        uris.push_back(std::move(uri));
    }
  if (uris.empty())
    return make_error(ec::invalid_config,
                      "the certificate names no task (no subject "
                      "alternative name syncfac://JOB/INDEX; make one per "
                      "task with scripts/make-cluster-certs.sh)");
  if (uris.size() > 1)
    return make_error(ec::invalid_config,
                      "the certificate names more than one task ("
                        + uris[0] + ", " + uris[1] + ")");
  auto t = parse_task_uri(uris[0]);
  if (!t)
    return make_error(ec::invalid_config, "the certificate's task URI '"
                                            + uris[0]
                                            + "' is not syncfac://JOB/INDEX");
  return *t;
}

bool certificate_names_host(x509_st* cert, const std::string& host) {
  if (cert == nullptr || host.empty())
    return false;
  auto h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']')
    h = h.substr(1, h.size() - 2);
  int ok = is_ip_address(h)
             ? X509_check_ip_asc(cert, h.c_str(), 0)
             : X509_check_host(cert, h.data(), h.size(),
                               X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, nullptr);
  ERR_clear_error();
  return ok == 1;
}

std::optional<task_id> task_at(const cluster_spec& cluster,
                               const std::string& host, uint16_t port) {
  for (const auto& t : cluster.tasks()) {
    const auto& addr = cluster.address(t);
    if (addr.host == host && addr.port == port)
      return t;
  }
  return std::nullopt;
}

std::string peer_refusal(const task_identity& id, x509_st* cert,
                         const task_id& claimed,
                         const std::optional<task_id>& dialled) {
  auto named = certificate_task(cert);
  if (!named)
    return "it claims to be " + claimed.str() + " but "
           + render(named.error());
  if (*named != claimed)
    return "it claims to be " + claimed.str()
           + " but its certificate is that of " + named->str();
  if (dialled && *dialled != claimed)
    return "the cluster file puts " + dialled->str()
           + " at this address, but the node there is " + claimed.str()
           + " (by its certificate)";
  if (id.cluster.contains(claimed)) {
    const auto& host = id.cluster.address(claimed).host;
    if (!certificate_names_host(cert, host))
      return "the certificate of " + claimed.str()
             + " does not name the host '" + host
             + "' of its cluster entry (its subject alternative names "
               "must)";
    return {};
  }
  // TensorFlow's evaluator outside "cluster" has no entry, hence no host.
  if (claimed.job == "evaluator" && id.cluster.count("evaluator") == 0)
    return {};
  return claimed.str() + " is not a task of this cluster";
}

caf::expected<tls_files> load_task_tls(const std::string& dir,
                                       const task_id& t) {
  std::error_code err;
  fs::path base{dir};
  auto name = t.job + "-" + std::to_string(t.index);
  if (!fs::is_directory(base, err))
    return load_tls_dir(dir); // names what is wrong with it
  if (fs::exists(base / "node.pem", err))
    return load_tls_dir(dir);
  if (fs::is_directory(base / name, err))
    return load_tls_dir((base / name).string());
  if (fs::exists(base / (name + ".pem"), err))
    return load_tls_files(dir, name + ".pem", name + ".key",
                          name + ".passphrase.txt");
  return make_error(ec::invalid_config,
                    "TLS: '" + dir + "' holds no files of " + t.str()
                      + ": neither node.pem, nor " + name + "/, nor "
                      + name + ".pem (scripts/make-cluster-certs.sh makes "
                      "them)");
}

caf::error bind_tls_identity(caf::actor_system_config& cfg,
                             const tls_files& files, const task_id& self,
                             const cluster_spec& cluster) {
  auto fail = [&](const std::string& why) {
    return make_error(ec::invalid_config,
                      "TLS: '" + files.certificate + "': " + why);
  };
  auto* bio = BIO_new_file(files.certificate.c_str(), "r");
  if (bio == nullptr) {
    ERR_clear_error();
    return fail("cannot be read");
  }
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  ERR_clear_error();
  if (cert == nullptr)
    return fail("holds no certificate");
  std::unique_ptr<X509, void (*)(X509*)> guard{cert, X509_free};
  auto named = certificate_task(cert);
  if (!named)
    return fail(render(named.error()));
  if (*named != self)
    return fail("is the certificate of " + named->str()
                + ", but this node is " + self.str()
                + " (each task needs its own; --tls_dir may name the "
                  "directory holding one per task)");
  if (cluster.contains(self)) {
    const auto& host = cluster.address(self).host;
    if (!certificate_names_host(cert, host))
      return fail("the certificate of " + self.str()
                  + " does not name the host '" + host
                  + "' of its cluster entry");
  }
  record_tls_identity(cfg, self, cluster);
  return caf::none;
}

void record_tls_identity(caf::actor_system_config& cfg, const task_id& self,
                         const cluster_spec& cluster) {
  caf::put(cfg.content, task_key, self.str());
  caf::put(cfg.content, cluster_key, cluster.to_json());
}

caf::error configure_node_tls(caf::actor_system_config& cfg,
                              const std::string& dir, const task_id& self,
                              const cluster_spec& cluster) {
  auto files = load_task_tls(dir, self);
  if (!files)
    return files.error();
  if (auto err = bind_tls_identity(cfg, *files, self, cluster))
    return err;
  return apply_tls(cfg, *files);
}

std::optional<task_identity>
tls_identity_of(const caf::actor_system_config& cfg) {
  auto task = caf::get_or(cfg, task_key, std::string{});
  auto json = caf::get_or(cfg, cluster_key, std::string{});
  if (task.empty() || json.empty())
    return std::nullopt;
  auto t = task_id::parse(task);
  auto c = cluster_spec::parse(json, "the TLS identity");
  if (!t || !c)
    return std::nullopt;
  task_identity id;
  id.self = *t;
  id.cluster = std::move(*c);
  id.cluster.task.reset();
  return id;
}

bool binds_tasks(caf::actor_system& sys) {
  // Asked at every cluster hello: the key alone, not the cluster's JSON
  // (which tls_identity_of parses, once, for the transport).
  return !caf::get_or(sys.config(), task_key, std::string{}).empty();
}

std::optional<task_id> verified_task(caf::actor_system& sys,
                                     const caf::node_id& node) {
  auto peers = verified_peers_of(sys, false);
  if (!peers)
    return std::nullopt;
  return peers->find(to_string(node));
}

// -- verified_peers ---------------------------------------------------------

void verified_peers::add(const std::string& node, const task_id& t) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++live_[node][t];
}

void verified_peers::remove(const std::string& node, const task_id& t) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = live_.find(node);
  if (i == live_.end())
    return;
  auto j = i->second.find(t);
  if (j != i->second.end() && --j->second <= 0)
    i->second.erase(j);
  if (i->second.empty())
    live_.erase(i);
}

std::optional<task_id> verified_peers::find(const std::string& node) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = live_.find(node);
  if (i == live_.end() || i->second.size() != 1)
    return std::nullopt;
  return i->second.begin()->first;
}

void verified_peers::refused(const std::string& address, std::string why) {
  std::lock_guard<std::mutex> guard{mtx_};
  refusals_[address] = std::move(why);
}

std::string verified_peers::refusal(const std::string& address) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = refusals_.find(address);
  return i == refusals_.end() ? std::string{} : i->second;
}

std::string tls_refusal(caf::actor_system& sys, const std::string& host,
                        uint16_t port) {
  auto peers = verified_peers_of(sys, false);
  if (!peers)
    return {};
  return peers->refusal(host_port{host, port}.str());
}

namespace {

std::mutex registries_mtx;
std::map<const caf::actor_system*, std::shared_ptr<verified_peers>>
  registries;

} // namespace

std::shared_ptr<verified_peers> verified_peers_of(caf::actor_system& sys,
                                                  bool create) {
  std::lock_guard<std::mutex> guard{registries_mtx};
  auto i = registries.find(&sys);
  if (i != registries.end())
    return i->second;
  if (!create)
    return nullptr;
  auto made = std::make_shared<verified_peers>();
  registries.emplace(&sys, made);
  return made;
}

void forget_verified_peers(caf::actor_system& sys) {
  std::lock_guard<std::mutex> guard{registries_mtx};
  registries.erase(&sys);
}

} // namespace syncfac::net
