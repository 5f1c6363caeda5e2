#include "engine/step/trace.h"

#include <cstdio>
#include <fstream>

namespace chorus {

Trace::Trace(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

int64_t Trace::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0_)
      .count();
}

int64_t Trace::clock_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
}

void Trace::push(Ev e) {
  std::lock_guard l(m_);
  if (ring_.size() >= capacity_) {
    ring_.pop_front();
    ++dropped_;
  }
  ring_.push_back(std::move(e));
}

void Trace::complete(const std::string& cat, const std::string& name, int pid, int64_t tid, int64_t ts_us,
                     int64_t dur_us, std::string args) {
  push({'X', cat, name, std::move(args), pid, tid, ts_us, dur_us, 0});
}

void Trace::instant(const std::string& cat, const std::string& name, int pid, int64_t tid, int64_t ts_us,
                    std::string args) {
  push({'i', cat, name, std::move(args), pid, tid, ts_us, 0, 0});
}

void Trace::async_begin(const std::string& cat, const std::string& name, int64_t id, int64_t ts_us,
                        std::string args, int pid) {
  push({'b', cat, name, std::move(args), pid, 0, ts_us, 0, id});
}

void Trace::async_end(const std::string& cat, const std::string& name, int64_t id, int64_t ts_us,
                      std::string args, int pid) {
  push({'e', cat, name, std::move(args), pid, 0, ts_us, 0, id});
}

int64_t Trace::us_at(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - t0_).count();
}

void Trace::name_lane(int pid, int64_t tid, const std::string& name) {
  std::lock_guard l(m_);
  lanes_[{pid, tid}] = name;
}

size_t Trace::size() const {
  std::lock_guard l(m_);
  return ring_.size();
}

int64_t Trace::dropped() const {
  std::lock_guard l(m_);
  return dropped_;
}

std::string Trace::quote(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    // The length of a well-formed UTF-8 sequence starting here (0: not one).
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n > 1) {
      if (i + n > s.size()) n = 0;
      for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) n = 0;
    }
    if (n == 0) {  // a stray byte
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n == 1) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  return out + "\"";
}

std::string Trace::json() const {
  std::lock_guard l(m_);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"chorus\",\"dropped\":" +
                    std::to_string(dropped_) + ",\"capacity\":" + std::to_string(capacity_) +
                    "},\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const auto& [pid, name] :
       {std::pair{kEnginePid, "engine"}, std::pair{kBlocksPid, "blocks"}, std::pair{kRolesPid, "roles"},
        std::pair{kGatewayPid, "gateway"}, std::pair{kClusterPid, "cluster"}}) {
    sep();
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":0,\"args\":{\"name\":" + quote(name) + "}}";
  }
  for (const auto& [lane, name] : lanes_) {
    sep();
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(lane.first) +
           ",\"tid\":" + std::to_string(lane.second) + ",\"args\":{\"name\":" + quote(name) + "}}";
  }
  for (const Ev& e : ring_) {
    sep();
    out += "{\"ph\":\"";
    out += e.ph;
    out += "\",\"cat\":" + quote(e.cat) + ",\"name\":" + quote(e.name) + ",\"pid\":" + std::to_string(e.pid) +
           ",\"tid\":" + std::to_string(e.tid) + ",\"ts\":" + std::to_string(e.ts);
    if (e.ph == 'X') out += ",\"dur\":" + std::to_string(e.dur);
    if (e.ph == 'i') out += ",\"s\":\"t\"";
    if (e.ph == 'b' || e.ph == 'e') out += ",\"id\":\"" + std::to_string(e.id) + "\"";
    if (!e.args.empty()) out += ",\"args\":" + e.args;
    out += "}";
  }
  return out + "\n]}\n";
}

Status Trace::write(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return make_error(Errc::io, "cannot write the trace to " + path);
  f << json();
  f.close();
  if (!f) return make_error(Errc::io, "writing the trace to " + path + " failed");
  return Status::success();
}

}  // namespace chorus
