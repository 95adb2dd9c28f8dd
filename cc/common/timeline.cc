#include "common/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tf_ring {

namespace {
constexpr std::chrono::milliseconds kFlushPeriod(100);

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string JsonInts(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string Micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", ns / 1000.0);
  return buf;
}

bool WriteAll(int fd, const std::string& data, int64_t offset) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = pwrite(fd, data.data() + done, data.size() - done, offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}
}  // namespace

Status Timeline::Start(const std::string& path, bool mark_cycles) {
  Stop();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return Status::InvalidArgument("cannot write the timeline to '" + path + "': " +
                                   std::strerror(errno));
  }
  const std::string head =
      "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"tf_ring rank 0\"}},\n"
      "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"engine cycles\"}}";
  WriteAll(fd, head + "\n]\n", 0);
  std::lock_guard<std::mutex> lock(mu_);
  fd_ = fd;
  close_offset_ = static_cast<int64_t>(head.size());
  mark_cycles_ = mark_cycles;
  origin_ = Clock::now();
  rows_.clear();
  pending_.clear();
  stopping_ = false;
  writer_ = std::thread(&Timeline::WriterLoop, this);
  active_ = true;
  return Status::OK();
}

void Timeline::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!writer_.joinable()) return;
    active_ = false;
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  close(fd_);
  fd_ = -1;
}

int Timeline::RowOf(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  const int tid = static_cast<int>(rows_.size()) + 1;  // row 0 is the engine
  rows_.emplace(tensor, tid);
  Event meta{tid, nullptr, 0, 0, false, 0, tensor, Args()};
  pending_.push_back(std::move(meta));
  return tid;
}

void Timeline::Phase(const std::string& tensor, const char* phase, Clock::time_point start,
                     Clock::time_point end, Args args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!active()) return;
  const int tid = RowOf(tensor);
  if (start < origin_) start = origin_;  // enqueued before the timeline started
  const int64_t start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(start - origin_).count();
  const int64_t dur_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  pending_.push_back(Event{tid, phase, start_ns, dur_ns < 0 ? 0 : dur_ns, false, 0, std::string(),
                           std::move(args)});
}

void Timeline::CycleMark(int64_t cycle, Clock::time_point when) {
  if (!active() || !mark_cycles_) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when - origin_).count();
  pending_.push_back(Event{0, "CYCLE", ns, 0, true, cycle, std::string(), Args()});
}

std::string Timeline::Format(const Event& e) const {
  if (e.phase == nullptr) {
    return "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" + std::to_string(e.tid) +
           ",\"args\":{\"name\":" + JsonString(e.label) + "}}";
  }
  std::string out = "{\"name\":\"" + std::string(e.phase) + "\",\"pid\":0,\"tid\":" +
                    std::to_string(e.tid) + ",\"ts\":" + Micros(e.start_ns);
  if (e.instant) {
    return out + ",\"ph\":\"i\",\"s\":\"g\",\"args\":{\"cycle\":" + std::to_string(e.cycle) + "}}";
  }
  out += ",\"ph\":\"X\",\"dur\":" + Micros(e.duration_ns);
  std::string args;
  auto add = [&args](const std::string& key, const std::string& value) {
    args += (args.empty() ? "\"" : ",\"") + key + "\":" + value;
  };
  const Args& a = e.args;
  if (a.via) add("via", JsonString(a.via));
  if (a.via && std::strcmp(a.via, "coordinator") == 0) {
    add("arrived", JsonInts(a.arrived));
    add("waited_for", JsonInts(a.waited_for));
  }
  if (a.bytes >= 0) add("bytes", std::to_string(a.bytes));
  if (a.tensors_in_batch >= 0) add("tensors_in_batch", std::to_string(a.tensors_in_batch));
  if (a.transport) add("transport", JsonString(a.transport));
  if (!a.error.empty()) add("error", JsonString(a.error));
  if (!args.empty()) out += ",\"args\":{" + args + "}";
  return out + "}";
}

void Timeline::Flush(std::vector<Event>* events) {
  if (events->empty() || fd_ < 0) return;
  std::string chunk;
  for (const Event& e : *events) chunk += ",\n" + Format(e);
  // Overwrite the closing bracket, then close the array again.
  if (WriteAll(fd_, chunk + "\n]\n", close_offset_)) close_offset_ += static_cast<int64_t>(chunk.size());
  events->clear();
}

void Timeline::WriterLoop() {
  std::vector<Event> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait_for(lock, kFlushPeriod, [this] { return stopping_; });
    batch.swap(pending_);
    const bool last = stopping_;
    lock.unlock();
    Flush(&batch);
    lock.lock();
    if (last && pending_.empty()) return;
  }
}

}  // namespace tf_ring
