#include "actors/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "actors/sandbox_seccomp.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;

// Where pids cgroups can be made, or "" (none: no process cap, kills by process group only).
const std::string& cgroup_root() {
  static const std::string root = [] {
    for (const char* c : {"/sys/fs/cgroup/pids", "/sys/fs/cgroup"}) {
      const std::string probe = std::string(c) + "/chorus-probe-" + std::to_string(::getpid());
      if (std::string(c) == "/sys/fs/cgroup" && !fs::exists("/sys/fs/cgroup/cgroup.controllers")) continue;
      if (::mkdir(probe.c_str(), 0755) != 0) continue;
      const bool has_max = fs::exists(probe + "/pids.max");
      ::rmdir(probe.c_str());
      if (has_max) return std::string(c);
    }
    return std::string();
  }();
  return root;
}

// The PATH a tool runs with (its environment holds nothing of the server's).
constexpr const char* kToolPath = "/usr/local/bin:/usr/bin:/bin";

// The absolute path of `name` in `path` (the server's PATH when null; "" if not found); a name
// with a slash is taken as is.
std::string find_in_path(const std::string& name, const char* path = nullptr) {
  if (name.find('/') != std::string::npos) return name;
  if (!path) path = std::getenv("PATH");
  std::string p = path ? path : kToolPath;
  for (size_t i = 0; i <= p.size();) {
    const size_t colon = std::min(p.find(':', i), p.size());
    const std::string cand = (colon > i ? p.substr(i, colon - i) : ".") + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    i = colon + 1;
  }
  return "";
}

bool plain_requested() {  // read at each use: a test may set it
  const char* e = std::getenv("CHORUS_SANDBOX");
  return e && std::string(e) == "plain";
}

const std::string& bwrap_path() {
  static const std::string none;
  if (plain_requested()) return none;
  static const std::string p = [] {
    const std::string b = find_in_path("bwrap");
    if (b.empty()) return b;
    // It must work here (user namespaces may be off): one trial run.
    const std::string cmd = b +
                            " --ro-bind / / --dev /dev --proc /proc --unshare-all --unshare-user --uid 65534 "
                            "--gid 65534 --die-with-parent true 2>/dev/null";
    return std::system(cmd.c_str()) == 0 ? b : std::string();
  }();
  return p;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f.flush());
}

// Kills every process in the cgroup until it is empty.
void kill_cgroup_members(const std::string& cg) {
  if (cg.empty()) return;
  for (int round = 0; round < 200; ++round) {
    std::ifstream procs(cg + "/cgroup.procs");
    bool any = false;
    for (pid_t pid; procs >> pid;) {
      any = true;
      ::kill(pid, SIGKILL);
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// ... and removes it.
void kill_cgroup(const std::string& cg) {
  if (cg.empty()) return;
  kill_cgroup_members(cg);
  ::rmdir(cg.c_str());
}

}  // namespace

std::string ToolResult::describe() const {
  char buf[96];
  if (timed_out) {
    std::snprintf(buf, sizeof buf, "timed out after %.1f s (killed)", seconds);
    return buf;
  }
  if (output_truncated) return "output went past the limit (killed)";
  if (dir_full) return "its directory went past its size or file limit (killed; the directory was emptied)";
  if (cancelled) return "cancelled: its program ended (killed)";
  if (signal != 0)
    return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exited with status " + std::to_string(exit_code);
}

std::string Sandbox::missing_isolation() {
  std::string missing;
  if (plain_requested())
    missing = "bubblewrap (CHORUS_SANDBOX=plain turns it off)";
  else if (bwrap_path().empty())
    missing =
        "bubblewrap (`bwrap` is not installed, or cannot make user namespaces here; Debian: apt-get "
        "install bubblewrap, and allow unprivileged user namespaces)";
  if (cgroup_root().empty())
    missing += std::string(missing.empty() ? "" : "; ") + "a pids cgroup (no writable pids controller)";
  return missing;
}

std::string Sandbox::isolation() {
  std::string s = bwrap_path().empty() ? "no bubblewrap (commands run in the working directory)"
                                       : "bubblewrap (uid 65534, system directories only) + seccomp";
  s += cgroup_root().empty() ? " + no pids cgroup" : " + pids cgroup";
  return s + " + rlimits";
}

Result<Sandbox> Sandbox::create(const std::string& base_dir, const std::string& name) {
  const bool plain =
      !name.empty() && name.size() <= 64 &&
      std::all_of(name.begin(), name.end(),
                  [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                  }) &&
      name != "." && name != "..";
  if (!plain)
    return make_error(Errc::invalid_argument, "sandbox name \"" + name + "\": letters, digits, - _ . only");
  std::error_code ec;
  fs::create_directories(base_dir, ec);
  const std::string dir = fs::absolute(base_dir + "/" + name, ec).string();
  fs::remove_all(dir, ec);  // a fresh directory: nothing from an earlier program of that name
  if (!fs::create_directory(dir, ec))
    return make_error(Errc::io, "sandbox " + dir + ": cannot create: " + (ec ? ec.message() : "exists"));
  ::chmod(dir.c_str(), 0700);
  Sandbox s;
  s.dir_ = dir;
  s.name_ = name;
  return s;
}

Sandbox::Sandbox(Sandbox&& o) noexcept : dir_(std::move(o.dir_)), name_(std::move(o.name_)), runs_(o.runs_) {
  o.dir_.clear();
}

Sandbox& Sandbox::operator=(Sandbox&& o) noexcept {
  if (this != &o) {
    (void)destroy();
    dir_ = std::move(o.dir_);
    name_ = std::move(o.name_);
    runs_ = o.runs_;
    o.dir_.clear();
  }
  return *this;
}

Sandbox::~Sandbox() {
  (void)destroy();
}

Status Sandbox::destroy() {
  if (dir_.empty()) return Status::success();
  std::error_code ec;
  fs::remove_all(dir_, ec);
  const std::string dir = dir_;
  dir_.clear();
  if (ec) return make_error(Errc::io, "sandbox " + dir + ": cannot remove: " + ec.message());
  return Status::success();
}

namespace {

using Clock = std::chrono::steady_clock;

// What of the host a tool sees: the system directories, read-only (a merged /usr's links as
// links), and of /etc only what programs need to start and name users — not shadow, gshadow,
// sudoers, ssh keys or machine credentials. No /root, /home, model cache or project tree.
std::vector<std::string> system_binds() {
  std::vector<std::string> args = {"--ro-bind", "/usr", "/usr"};
  for (const char* d : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    if (fs::is_symlink(d, ec)) {
      args.insert(args.end(), {"--symlink", fs::read_symlink(d, ec).string(), d});
    } else if (fs::is_directory(d, ec)) {
      args.insert(args.end(), {"--ro-bind", d, d});
    }
  }
  for (const char* e :
       {"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
        "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/ssl/certs", "/etc/ca-certificates"})
    args.insert(args.end(), {"--ro-bind-try", e, e});
  return args;
}

// The fd the child hands bubblewrap its seccomp program on (set up between fork and exec).
constexpr int kSeccompFd = 3;

// The command as run: under bubblewrap where it works (the system directories read-only, the
// sandbox's directory read-write, a private /tmp and /proc, new namespaces — user, pid,
// network, ipc, uts, cgroup — as an unprivileged uid, the seccomp filter), else as is.
std::vector<std::string> command_line(const std::string& exe, const std::vector<std::string>& argv,
                                      const std::string& dir, const SandboxAccess& access, bool seccomp,
                                      int64_t tmp_bytes) {
  std::vector<std::string> args;
  if (const std::string& bwrap = bwrap_path(); !bwrap.empty()) {
    args = {bwrap};
    const std::vector<std::string> binds = system_binds();
    args.insert(args.end(), binds.begin(), binds.end());
    args.insert(args.end(), {"--dev", "/dev", "--proc", "/proc", "--size", std::to_string(tmp_bytes),
                             "--tmpfs", "/tmp", "--bind", dir, dir});
    for (const auto& p : access.read) args.insert(args.end(), {"--ro-bind", p, p});
    for (const auto& p : access.write) args.insert(args.end(), {"--bind", p, p});
    if (access.network)  // and the names it resolves with
      for (const char* e : {"/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf"})
        args.insert(args.end(), {"--ro-bind-try", e, e});
    args.insert(args.end(), {"--chdir", dir, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid",
                             "65534", "--die-with-parent", "--new-session"});
    if (access.network) args.push_back("--share-net");
    if (seccomp) args.insert(args.end(), {"--seccomp", std::to_string(kSeccompFd)});
    args.push_back("--");
  }
  args.push_back(exe);
  args.insert(args.end(), argv.begin() + 1, argv.end());
  return args;
}

// The environment a tool runs with: nothing of the server's (a secret in it would reach the
// model's context through the tool's output) — PATH, LANG, and HOME at its directory.
std::vector<std::string> tool_environment(const std::string& dir, const SandboxAccess& access) {
  std::vector<std::string> env = {std::string("PATH=") + kToolPath, "LANG=C.UTF-8", "HOME=" + dir};
  for (const std::string& kv : access.env) {  // the tool's own: one of the above replaced, or added
    const std::string key = kv.substr(0, kv.find('=') + 1);
    auto same =
        std::find_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(key, 0) == 0; });
    if (same != env.end())
      *same = kv;
    else
      env.push_back(kv);
  }
  return env;
}

// The child, between fork and exec: only async-signal-safe calls. It joins the run's cgroup
// (`procs`: its cgroup.procs, or ""), takes the rlimits, reads `in`, writes `out`, hands on the
// seccomp program (`seccomp`, or -1), and runs `cargs` in `dir` with the environment `envp`.
[[noreturn]] void exec_child(char* const* cargs, char* const* envp, const char* procs,
                             const SandboxLimits& limits, const char* dir, int in, int out, int seccomp) {
  ::setsid();
  if (procs[0] != '\0') {
    const int fd = ::open(procs, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      char num[24];
      int n = std::snprintf(num, sizeof num, "%d", static_cast<int>(::getpid()));
      (void)!::write(fd, num, static_cast<size_t>(n));
      ::close(fd);
    }
  }
  auto lim = [](int what, rlim_t v) {
    rlimit r{v, v};
    ::setrlimit(what, &r);
  };
  lim(RLIMIT_AS, static_cast<rlim_t>(limits.memory_bytes));
  lim(RLIMIT_CPU, static_cast<rlim_t>(limits.cpu_seconds));
  lim(RLIMIT_FSIZE, static_cast<rlim_t>(limits.max_file_bytes));
  lim(RLIMIT_NOFILE, 256);
  lim(RLIMIT_CORE, 0);
  ::dup2(in, 0);
  ::dup2(out, 1);
  ::dup2(out, 2);
  if (seccomp >= 0) {  // for bubblewrap, which loads it just before it runs the command
    if (seccomp == kSeccompFd)
      ::fcntl(kSeccompFd, F_SETFD, 0);
    else
      ::dup2(seccomp, kSeccompFd);
  }
  if (::chdir(dir) != 0) ::_exit(126);
  ::execve(cargs[0], cargs, envp);
  ::_exit(127);
}

// Whether `dir` holds more than the limits allow: allocated bytes (what the disk gives, so a
// sparse file counts what it uses) and entries. The walk stops at the first limit passed.
bool over_dir_limits(const std::string& dir, int64_t max_bytes, int64_t max_files) {
  std::error_code ec;
  int64_t bytes = 0, files = 0;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0) bytes += static_cast<int64_t>(st.st_blocks) * 512;
    if (++files > max_files || bytes > max_bytes) return true;
  }
  return false;
}

// Removes what is in `dir`, keeping the directory.
void empty_dir(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    fs::remove_all(it->path(), ignored);
  }
}

// One run from fork to its end: its input fed, its output read (up to the limit), and it killed
// — with every process it started — at its deadline, when cancelled, when its output overflows,
// or when it exited but what it started still holds the output open.
class Supervisor {
 public:
  Supervisor(pid_t pid, int out_fd, int in_fd, const std::string& input, const SandboxLimits& limits,
             const std::atomic<bool>* cancel, const std::string& cgroup, const std::string& dir,
             Clock::time_point t0)
      : pid_(pid),
        out_fd_(out_fd),
        in_fd_(in_fd),
        input_(input),
        limits_(limits),
        cancel_(cancel),
        cgroup_(cgroup),
        dir_(dir),
        t0_(t0),
        deadline_(t0 + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(limits.timeout_s))) {
    if (input_.empty()) {
      ::close(in_fd_);
      in_fd_ = -1;
    } else {
      ::fcntl(in_fd_, F_SETFL, O_NONBLOCK);
    }
  }

  ToolResult run() {
    while (reading_ || !exited_) {
      const auto now = Clock::now();
      watch(now);
      if (!reading_) {
        if (!exited_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      pollfd fds[2] = {{out_fd_, POLLIN, 0}, {in_fd_, POLLOUT, 0}};
      const int left_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count(), 1, 50));
      if (::poll(fds, in_fd_ >= 0 ? 2 : 1, killed_ ? 10 : left_ms) < 0 && errno != EINTR) break;
      if (in_fd_ >= 0 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) feed();
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) drain();
      if (killed_ && exited_) reading_ = false;  // do not wait on pipes held by what is being killed
    }
    return finish();
  }

 private:
  void kill_all() {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    killed_ = true;
  }

  // The deadline, a cancel, its exit; after the exit a short grace for what it started to let go
  // of the output, then that is killed too (a tool's run ends with its command).
  void watch(Clock::time_point now) {
    if (now >= deadline_ && !killed_) {
      r_.timed_out = true;
      kill_all();
    }
    if (cancel_ && cancel_->load() && !killed_) {
      r_.cancelled = true;
      kill_all();
    }
    if (!killed_ && now - dir_checked_ >= std::chrono::milliseconds(50)) {
      dir_checked_ = now;
      if (over_dir_limits(dir_, limits_.max_dir_bytes, limits_.max_dir_files)) {
        r_.dir_full = true;
        kill_all();
      }
    }
    if (!exited_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) {
      exited_ = true;
      exited_at_ = now;
    }
    if (exited_ && reading_ && !killed_ && now - exited_at_ > std::chrono::milliseconds(200)) {
      kill_all();
      kill_cgroup_members(cgroup_);
    }
  }

  void feed() {
    const ssize_t n = ::write(in_fd_, input_.data() + fed_, input_.size() - fed_);
    if (n > 0) fed_ += static_cast<size_t>(n);
    if (n < 0 && errno != EAGAIN && errno != EINTR) fed_ = input_.size();  // it does not read: stop feeding
    if (fed_ == input_.size()) {
      ::close(in_fd_);
      in_fd_ = -1;
    }
  }

  void drain() {
    char buf[8192];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n > 0) {
      const size_t room = limits_.max_output_bytes - std::min(limits_.max_output_bytes, r_.output.size());
      r_.output.append(buf, std::min(room, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) > room && !killed_) {
        r_.output_truncated = true;
        kill_all();
      }
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      reading_ = false;  // every writer is gone (or the pipe broke)
    }
  }

  ToolResult finish() {
    if (in_fd_ >= 0) ::close(in_fd_);
    ::close(out_fd_);
    if (!exited_) ::waitpid(pid_, &status_, 0);
    ::kill(-pid_, SIGKILL);  // whatever of its process group is left
    kill_cgroup(cgroup_);    // and whatever detached from it
    if (r_.dir_full || over_dir_limits(dir_, limits_.max_dir_bytes, limits_.max_dir_files)) {
      r_.dir_full = true;  // what it wrote does not stay on the host's disk
      empty_dir(dir_);
    }
    r_.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (WIFEXITED(status_)) r_.exit_code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) r_.signal = WTERMSIG(status_);
    if (r_.timed_out || r_.output_truncated || r_.cancelled || r_.dir_full)
      r_.signal = 0;  // we killed it: the reason is said above
    return std::move(r_);
  }

  const pid_t pid_;
  const int out_fd_;
  int in_fd_;
  const std::string& input_;
  const SandboxLimits& limits_;
  const std::atomic<bool>* cancel_;
  const std::string& cgroup_;
  const std::string& dir_;
  const Clock::time_point t0_, deadline_;
  Clock::time_point dir_checked_ = t0_;
  ToolResult r_;
  size_t fed_ = 0;
  bool reading_ = true, killed_ = false, exited_ = false;
  int status_ = 0;
  Clock::time_point exited_at_ = t0_;
};

}  // namespace

// A pids cgroup for one run, its process count capped ("" when there is none).
std::string Sandbox::make_cgroup(const SandboxLimits& limits) {
  if (cgroup_root().empty()) return "";
  const std::string cg =
      cgroup_root() + "/chorus-" + std::to_string(::getpid()) + "-" + name_ + "-" + std::to_string(++runs_);
  if (::mkdir(cg.c_str(), 0755) != 0 || !write_file(cg + "/pids.max", std::to_string(limits.max_processes))) {
    ::rmdir(cg.c_str());
    return "";
  }
  return cg;
}

Result<ToolResult> Sandbox::run(const std::vector<std::string>& argv, const SandboxLimits& limits,
                                const std::string& input, const std::atomic<bool>* cancel) {
  if (dir_.empty()) return make_error(Errc::invalid_argument, "sandbox " + name_ + " is destroyed");
  if (argv.empty()) return make_error(Errc::invalid_argument, "sandbox " + name_ + ": empty command");
  // Everything the child needs is prepared here: between fork and exec only async-signal-safe calls.
  // The same path inside: /usr and the system directories are bound where they are.
  const std::string exe = find_in_path(argv[0], kToolPath);
  if (exe.empty() || ::access(exe.c_str(), X_OK) != 0) {
    ToolResult r;
    r.exit_code = 127;
    r.output = argv[0] + ": command not found\n";
    return r;
  }
  const int seccomp = bwrap_path().empty() ? -1 : sandbox_seccomp_program();
  if (!bwrap_path().empty() && seccomp < 0)
    return make_error(Errc::internal, "sandbox " + name_ + ": cannot build the seccomp filter");
  for (const auto* list : {&limits.access.read, &limits.access.write})
    for (const auto& p : *list)
      if (!fs::exists(p))
        return make_error(Errc::not_found,
                          "sandbox " + name_ + ": " + p + " (a path the tool may reach) does not exist");
  std::vector<std::string> args =
      command_line(exe, argv, dir_, limits.access, seccomp >= 0, limits.max_dir_bytes);
  std::vector<std::string> env = tool_environment(dir_, limits.access);
  auto pointers = [](std::vector<std::string>& v) {
    std::vector<char*> p;
    for (auto& a : v) p.push_back(a.data());
    p.push_back(nullptr);
    return p;
  };
  std::vector<char*> cargs = pointers(args), envp = pointers(env);
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } seccomp_closer{seccomp};
  const std::string cg = make_cgroup(limits);
  const std::string procs = cg.empty() ? "" : cg + "/cgroup.procs";

  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return make_error(Errc::io, std::string("sandbox: pipe: ") + std::strerror(errno));
  if (::pipe2(in, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return make_error(Errc::io, std::string("sandbox: pipe: ") + std::strerror(errno));
  }
  const auto t0 = Clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], in[0], in[1]}) ::close(fd);
    kill_cgroup(cg);
    return make_error(Errc::io, std::string("sandbox: fork: ") + std::strerror(errno));
  }
  if (pid == 0)
    exec_child(cargs.data(), envp.data(), procs.c_str(), limits, dir_.c_str(), in[0], out[1], seccomp);
  ::close(out[1]);
  ::close(in[0]);
  return Supervisor(pid, out[0], in[1], input, limits, cancel, cg, dir_, t0).run();
}

}  // namespace chorus
