#include "launcher/mpirun_command.h"

#include <netdb.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "graph/error.h"

namespace onyx::cli {

namespace {

/// (host, slots) pairs of "h1:2,h2" (slots default 1).
std::vector<std::pair<std::string, int>> parse_hosts(const std::string& list) {
  std::vector<std::pair<std::string, int>> out;
  std::stringstream ss(list);
  std::string item;
  static const std::regex re(R"(([A-Za-z0-9_.\-]+)(:([0-9]+))?)");
  while (std::getline(ss, item, ',')) {
    std::smatch m;
    ONYX_CHECK(std::regex_match(item, m, re), "[launch] bad host '{}' in --hosts '{}'; expected "
               "host or host:slots, comma-separated", item, list);
    int slots = m[3].matched ? std::atoi(m[3].str().c_str()) : 1;
    ONYX_CHECK(slots >= 1, "[launch] host '{}' has {} slots; at least 1 expected", m[1].str(), slots);
    out.emplace_back(m[1].str(), slots);
  }
  ONYX_CHECK(!out.empty(), "[launch] --hosts is empty");
  return out;
}

/// Open MPI hostfile lines: "host [slots=N] [max_slots=M]", '#' comments.
std::vector<std::pair<std::string, int>> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  ONYX_CHECK(in, "[launch] cannot read hostfile '{}'", path);
  std::vector<std::pair<std::string, int>> out;
  std::string line;
  int lineno = 0;
  static const std::regex re(R"(\s*([A-Za-z0-9_.\-]+)(\s+slots\s*=\s*([0-9]+))?(\s+max_slots\s*=\s*[0-9]+)?\s*)");
  while (std::getline(in, line)) {
    ++lineno;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::smatch m;
    ONYX_CHECK(std::regex_match(line, m, re), "[launch] hostfile '{}' line {}: '{}' is not 'host slots=N'",
               path, lineno, line);
    out.emplace_back(m[1].str(), m[3].matched ? std::atoi(m[3].str().c_str()) : 1);
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
    int slots = 0;
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
