#include "common/observability/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace tf_ring {

namespace {
constexpr std::chrono::milliseconds kFlushPeriod(100);

// Formatting appends into one growing buffer: the writer thread shares the
// cores with training, so it avoids a temporary string per field.
void AppendJsonString(const char* s, std::string* out) {
  out->push_back('"');
  for (; *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendInts(const std::vector<int>& v, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out->push_back(',');
    AppendInt(v[i], out);
  }
  out->push_back(']');
}

// Nanoseconds as microseconds with three decimals, without floating point.
void AppendMicros(int64_t ns, std::string* out) {
  if (ns < 0) {
    out->push_back('-');
    ns = -ns;
  }
  AppendInt(ns / 1000, out);
  char frac[4] = {'.', static_cast<char>('0' + ns % 1000 / 100), static_cast<char>('0' + ns % 100 / 10),
                  static_cast<char>('0' + ns % 10)};
  out->append(frac, 4);
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

void Timeline::AppendFormatted(const Event& e, std::string* out) const {
  if (e.phase == nullptr) {
    out->append("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":");
    AppendInt(e.tid, out);
    out->append(",\"args\":{\"name\":");
    AppendJsonString(e.label.c_str(), out);
    out->append("}}");
    return;
  }
  out->append("{\"name\":\"").append(e.phase).append("\",\"pid\":0,\"tid\":");
  AppendInt(e.tid, out);
  out->append(",\"ts\":");
  AppendMicros(e.start_ns, out);
  if (e.instant) {
    out->append(",\"ph\":\"i\",\"s\":\"g\",\"args\":{\"cycle\":");
    AppendInt(e.cycle, out);
    out->append("}}");
    return;
  }
  out->append(",\"ph\":\"X\",\"dur\":");
  AppendMicros(e.duration_ns, out);
  bool first = true;
  auto key = [&](const char* name) {
    out->append(first ? ",\"args\":{\"" : ",\"").append(name).append("\":");
    first = false;
  };
  const Args& a = e.args;
  if (a.via) {
    key("via");
    AppendJsonString(a.via, out);
    if (std::strcmp(a.via, "coordinator") == 0) {
      key("arrived");
      AppendInts(a.arrived, out);
      key("waited_for");
      AppendInts(a.waited_for, out);
    }
  }
  if (a.bytes >= 0) {
    key("bytes");
    AppendInt(a.bytes, out);
  }
  if (a.tensors_in_batch >= 0) {
    key("tensors_in_batch");
    AppendInt(a.tensors_in_batch, out);
  }
  if (a.transport) {
    key("transport");
    AppendJsonString(a.transport, out);
  }
  if (a.process_set > 0) {
    key("process_set");
    AppendInt(a.process_set, out);
  }
  if (!a.error.empty()) {
    key("error");
    AppendJsonString(a.error.c_str(), out);
  }
  if (!first) out->push_back('}');
  out->push_back('}');
}

void Timeline::Flush(std::vector<Event>* events) {
  if (events->empty() || fd_ < 0) return;
  std::string& chunk = chunk_;  // reused: keeps its capacity between flushes
  chunk.clear();
  for (const Event& e : *events) {
    chunk.append(",\n");
    AppendFormatted(e, &chunk);
  }
  const size_t body = chunk.size();
  // Overwrite the closing bracket, then close the array again.
  chunk.append("\n]\n");
  if (WriteAll(fd_, chunk, close_offset_)) close_offset_ += static_cast<int64_t>(body);
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
