#include "launcher/mpirun_command.h"

#include <netdb.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include "graph/error.h"

namespace onyx::cli {

namespace {

// Hand-written scanners rather than std::regex: libstdc++'s regex matcher recurses per
// character, and `onyx launch --hosts` with a 100,000-character host name died of a stack
// overflow (SIGSEGV) in it.

// More slots than any host offers; keeps the sum over hosts far from int overflow.
constexpr int64_t kMaxSlots = 1 << 20;

bool host_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

/// Host name at the start of `s` ([A-Za-z0-9_.-]+), consumed; empty when there is none.
std::string_view take_host(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && host_char(s[n])) ++n;
  std::string_view host = s.substr(0, n);
  s.remove_prefix(n);
  return host;
}

/// A decimal count at the start of `s`, consumed; nullopt when there are no digits or it
/// exceeds kMaxSlots.
std::optional<int64_t> take_count(std::string_view& s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v > kMaxSlots || s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
    return std::nullopt;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return v;
}

void skip_blanks(std::string_view& s) {
  while (!s.empty() && (s[0] == ' ' || s[0] == '\t')) s.remove_prefix(1);
}

/// Consumes "KEY *= *N" at the start of `s`; nullopt (s unchanged) when it is not there.
std::optional<int64_t> take_setting(std::string_view& s, std::string_view key) {
  std::string_view t = s;
  if (t.substr(0, key.size()) != key) return std::nullopt;
  t.remove_prefix(key.size());
  skip_blanks(t);
  if (t.empty() || t[0] != '=') return std::nullopt;
  t.remove_prefix(1);
  skip_blanks(t);
  auto v = take_count(t);
  if (v) s = t;
  return v;
}

/// (host, slots) pairs of "h1:2,h2" (slots default 1).
std::vector<std::pair<std::string, int>> parse_hosts(const std::string& list) {
  std::vector<std::pair<std::string, int>> out;
  std::string_view rest = list;
  while (!rest.empty() || out.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma), s = item;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    std::string_view host = take_host(s);
    std::optional<int64_t> slots = 1;
    if (!s.empty() && s[0] == ':') {
      s.remove_prefix(1);
      slots = take_count(s);
    }
    ONYX_CHECK(!host.empty() && slots && s.empty(), "[launch] bad host '{}' in --hosts '{}'; expected host or "
               "host:slots (slots 1 to {}), comma-separated", item, list, kMaxSlots);
    ONYX_CHECK(*slots >= 1, "[launch] host '{}' has {} slots; at least 1 expected", host, *slots);
    out.emplace_back(std::string(host), static_cast<int>(*slots));
    if (comma == std::string_view::npos) break;
  }
  return out;
}

/// Open MPI hostfile lines: "host [slots=N] [max_slots=M]", '#' comments.
std::vector<std::pair<std::string, int>> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  ONYX_CHECK(in, "[launch] cannot read hostfile '{}'", path);
  std::vector<std::pair<std::string, int>> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string_view s = line;
    skip_blanks(s);
    std::string_view host = take_host(s);
    std::optional<int64_t> slots = 1;
    bool ok = !host.empty();
    // Each setting must be preceded by blanks; slots before max_slots, each at most once.
    auto setting = [&](std::string_view key, std::optional<int64_t>* value) {
      std::string_view t = s;
      skip_blanks(t);
      if (t.size() == s.size()) return;
      std::string_view before = t;
      auto v = take_setting(t, key);
      if (t.size() != before.size()) {
        if (!v) ok = false;
        if (value) *value = v;
        s = t;
      }
    };
    setting("slots", &slots);
    setting("max_slots", nullptr);
    skip_blanks(s);
    ok = ok && slots && s.empty();
    ONYX_CHECK(ok, "[launch] hostfile '{}' line {}: '{}' is not 'host [slots=N] [max_slots=M]' (N from 1 to {})",
               path, lineno, line.substr(0, 200), kMaxSlots);
    ONYX_CHECK(*slots >= 1, "[launch] hostfile '{}' line {}: host '{}' has {} slots; at least 1 expected", path,
               lineno, host, *slots);
    out.emplace_back(std::string(host), static_cast<int>(*slots));
  }
  ONYX_CHECK(!out.empty(), "[launch] hostfile '{}' lists no hosts", path);
  return out;
}

bool resolves(const std::string& host) {
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, nullptr, &res);
  if (res) ::freeaddrinfo(res);
  return rc == 0;
}

}  // namespace

std::vector<std::string> mpirun_argv(const LaunchOptions& o, const std::string& mpirun,
                                     const std::string& self, bool as_root) {
  ONYX_CHECK(o.ranks >= 1, "[launch] -n should be at least 1 but is {}", o.ranks);
  ONYX_CHECK(o.hosts.empty() || o.hostfile.empty(), "[launch] give --hosts or --hostfile, not both");
  ONYX_CHECK(!o.command.empty(), "[launch] no command to run; usage: onyx launch -n N -- onyx train ...");
  std::vector<std::pair<std::string, int>> hosts;
  if (!o.hosts.empty()) hosts = parse_hosts(o.hosts);
  if (!o.hostfile.empty()) hosts = parse_hostfile(o.hostfile);
  if (!hosts.empty()) {
    int64_t slots = 0;  // at most kMaxSlots per host: no overflow
    for (const auto& [h, s] : hosts) {
      slots += s;
      ONYX_CHECK(!o.launch_agent.empty() || resolves(h), "[launch] host '{}' does not resolve (check the "
                 "name, /etc/hosts or DNS)", h);
    }
    ONYX_CHECK(slots >= o.ranks, "[launch] {} ranks asked for but the hosts offer {} slots", o.ranks, slots);
  }
  std::vector<std::string> argv = {mpirun};
  if (as_root) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-n", std::to_string(o.ranks)});
  if (hosts.empty()) argv.push_back("--oversubscribe");  // one machine: more ranks than cores is fine
  if (!o.hosts.empty()) {
    std::string list;
    for (const auto& [h, s] : hosts) list += (list.empty() ? "" : ",") + h + ":" + std::to_string(s);
    argv.insert(argv.end(), {"--host", list});
  }
  if (!o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", o.hostfile});
  argv.insert(argv.end(), {"--bind-to", o.bind ? "core" : "none"});
  if (!o.launch_agent.empty()) argv.insert(argv.end(), {"--mca", "plm_rsh_agent", o.launch_agent});
  // Ranks see the same library path, thread count and onyx settings as this shell.
  std::vector<std::string> env = {"LD_LIBRARY_PATH", "OMP_NUM_THREADS", "ONYX_COMM_TIMEOUT", "PATH"};
  env.insert(env.end(), o.export_env.begin(), o.export_env.end());
  for (const auto& e : env)
    if (std::getenv(e.c_str())) argv.insert(argv.end(), {"-x", e});
  for (const auto& a : o.mpirun_args) {
    // "--mca btl tcp,self" given as one value splits at spaces into mpirun's words.
    std::stringstream words(a);
    for (std::string w; words >> w;) argv.push_back(w);
  }
  std::vector<std::string> cmd = o.command;
  if (cmd[0] == "onyx") cmd[0] = self;
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                   "0123456789_-./:=,@+%") == std::string::npos;
    if (!out.empty()) out += ' ';
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

}  // namespace onyx::cli
