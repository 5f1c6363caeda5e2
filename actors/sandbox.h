// A tool sandbox: commands run for one program in a directory of their own, isolated and
// limited, and everything they leave behind is removed when the sandbox is destroyed.
//
// Isolation, the strongest that works here (isolation() says which):
//  - bubblewrap (`bwrap`, Debian): a read-only view of the root file system, the working
//    directory bound read-write, a private /tmp, new user/pid/net/ipc/uts namespaces (no
//    network: only a loopback of its own), killed with its parent;
//  - a pids cgroup (v1 `/sys/fs/cgroup/pids` or v2) capping the processes a run may have, and
//    used to kill every process of the run, however it detached;
//  - rlimits on every run: address space, CPU seconds, file size, open files, no core dumps;
//  - the working directory's total size and file count, watched while it runs, and a /tmp of
//    bounded size.
// Without bubblewrap (or with CHORUS_SANDBOX=plain), commands run in the working directory with
// the cgroup and rlimits only: a program with tools then refuses to start unless the user asked
// for it (ProgramHooks::unsafe_tools, `chorus run --unsafe-tools`), so isolation is never lost
// silently.
//
// A run ends with a ToolResult that says what happened — exit status, a signal, a timeout, an
// output limit — and never throws; the caller's program goes on.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace chorus {

// What one run may reach beyond the sandbox's defaults (a tool's opt-ins in its topology).
struct SandboxAccess {
  std::vector<std::string> env;          // KEY=VALUE, added to the empty environment
  bool network = false;                  // the host's network namespace (else none at all)
  std::vector<std::string> read, write;  // host paths bound read-only / read-write at their place
};

struct SandboxLimits {
  double timeout_s = 30;                    // wall clock; then the run is killed
  size_t max_output_bytes = 64 << 10;       // stdout and stderr together; more and the run is killed
  int64_t memory_bytes = int64_t{1} << 30;  // address space of each process
  int cpu_seconds = 60;
  int64_t max_file_bytes = int64_t{64} << 20;
  int max_processes = 64;  // with a pids cgroup
  // The working directory, all of it (checked every 50 ms and at the end: a run past either is
  // killed and the directory emptied), and the private /tmp (a tmpfs of this size: writes past
  // it fail with ENOSPC).
  int64_t max_dir_bytes = int64_t{256} << 20;
  int64_t max_dir_files = 10000;
  SandboxAccess access;
};

struct ToolResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  bool timed_out = false;
  bool output_truncated = false;  // output went past the limit (the run was killed)
  bool cancelled = false;         // killed because the caller asked (its program ended)
  bool dir_full = false;          // its directory went past max_dir_bytes/files (killed, emptied)
  std::string output;             // stdout and stderr, interleaved as written, at most the limit
  double seconds = 0;
  bool ok() const {
    return exit_code == 0 && !timed_out && !output_truncated && !cancelled && !dir_full && signal == 0;
  }
  std::string describe() const;  // "exited with status 0", "timed out after 2.0 s (killed)", ...
};

class Sandbox {
 public:
  // Creates `base_dir/name` (a fresh, empty working directory). Errors: the directory cannot
  // be made, or `name` is not a plain name.
  static Result<Sandbox> create(const std::string& base_dir, const std::string& name);
  Sandbox(Sandbox&&) noexcept;
  Sandbox& operator=(Sandbox&&) noexcept;
  ~Sandbox();  // destroy()

  // Runs argv[0] (looked up in PATH) with `input` on its stdin. Errors only when the run
  // cannot start at all (fork or pipe failed); what the command does is in the ToolResult.
  // `cancel`, when given and set (from another thread), kills the run within about 50 ms.
  Result<ToolResult> run(const std::vector<std::string>& argv, const SandboxLimits& limits = {},
                         const std::string& input = "", const std::atomic<bool>* cancel = nullptr);

  // Kills whatever is left of its runs and removes the working directory. Idempotent.
  Status destroy();

  const std::string& dir() const { return dir_; }
  static std::string isolation();  // "bubblewrap + pids cgroup + rlimits", or what is missing
  // What of the full isolation this machine lacks ("" : nothing): bubblewrap that works here,
  // a pids cgroup.
  static std::string missing_isolation();

 private:
  std::string make_cgroup(const SandboxLimits& limits);
  Sandbox() = default;
  std::string dir_;
  std::string name_;
  int runs_ = 0;
};

}  // namespace chorus
