// Internal to the topology reader (topology/topology*.cpp): the Loader that turns a parsed YAML
// file into a Topology, its members split by concept — the file's sections (topology.cpp) and
// each kind of actor (topology_actors.cpp). Not for other code: use topology/topology.h.
#pragma once

#include <yaml-cpp/yaml.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "topology/topology.h"
#include "topology/yaml_reader.h"

namespace chorus::topology::detail {

// A generator's or probe's `sampling:` (greedy when absent: reproducible runs).
SamplingParams read_sampling(const Reader& r, const YAML::Node& n, const std::string& path);
// A JSON Schema written in YAML (a mapping), as JSON text, checked: one that chorus cannot follow
// or that accepts nothing fails at `path` with what is wrong (engine/grammar/json_schema.h).
std::string read_schema(const Reader& r, const YAML::Node& n, const std::string& path);

// What yaml-cpp threw, as an Error at `label`:LINE:COLUMN (Errc::bad_format).
Error yaml_error(const std::string& label, const YAML::Exception& e);

// The node a key path ("actors.w.on[1]") names in `root`, and the path as the reader spells it.
std::pair<YAML::Node, std::string> node_at(const YAML::Node& root, const std::string& path);

struct Loader {
  const Reader& r;
  const LoadOptions& opts;
  Topology t;
  std::map<std::string, std::string> params;
  std::set<std::string> unset;  // declared without a value
  bool patching = false;        // reading a patch (topology/patch.cpp) over `t`

  // `event`: whether {{event}} (the text of the event that started the run) may appear; it is
  // kept for the run time to fill in.
  std::string text(const YAML::Node& n, const std::string& path, bool event = false);
  void read(const YAML::Node& root);
  void read_params(const YAML::Node& n);
  void read_tools(const YAML::Node& n);
  void read_tool_access(Tool& tool, const YAML::Node& n, const std::string& path);
  void read_block_name(const YAML::Node& key);
  Block& block_named(const std::string& n);
  void read_block(const std::string& bname, const YAML::Node& n);
  std::vector<std::string> block_list(const YAML::Node& n, const std::string& path);
  void check_block(const YAML::Node& at, const std::string& path, const std::string& n);
  void read_actor(Actor& a, const YAML::Node& n, const std::string& path);
  Placement read_placement(const YAML::Node& n, const std::string& path);
  YAML::Node required(const YAML::Node& n, const std::string& path, const std::string& key,
                      const std::string& what);
  void read_view_and_writes(Actor& a, const YAML::Node& n, const std::string& path, bool writes);
  void read_triggers(Actor& a, const YAML::Node& n, const std::string& path);
  void read_generator(Actor& a, const YAML::Node& n, const std::string& path);
  void read_probe(Actor& a, const YAML::Node& n, const std::string& path);
  void read_source(Actor& a, const YAML::Node& n, const std::string& path);
  void read_sink(Actor& a, const YAML::Node& n, const std::string& path);
  // Whether `name` is a tool `t` has; edit_program is added to `t` at its first mention.
  bool has_tool(const std::string& name);
  // Names across the file: events someone emits, sinks that exist, one writer per block.
  void resolve(const YAML::Node& root);
};

}  // namespace chorus::topology::detail
