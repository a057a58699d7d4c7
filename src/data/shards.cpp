#include "kiln/data/shards.h"

#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/http_request.h"
#include "kiln/data/image.h"
#include "kiln/data/readers.h"
#include "kiln/error.h"

namespace kiln::data {
namespace {

using json = nlohmann::json;

// A shard or index that is not there (as opposed to one that cannot be read).
class Missing : public Error {
 public:
  using Error::Error;
};

uint64_t mix(uint64_t a, uint64_t b) {  // splitmix64 of the pair: independent streams per (seed, epoch, ...)
  uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool is_store_url(const std::string& url) { return url.rfind("studio://", 0) == 0; }

// GET from the studio of this process's environment.
std::string studio_get(const std::string& url) {
  const char* server = std::getenv("KILN_STUDIO_URL");
  const char* token = std::getenv("KILN_STUDIO_TOKEN");
  KILN_CHECK(server && *server && token && *token, "reading ", url,
             " needs the studio: set KILN_STUDIO_URL and KILN_STUDIO_TOKEN (a job's ranks have both)");
  const std::string rest = url.substr(9);
  const size_t slash = rest.find('/');
  KILN_CHECK(slash != std::string::npos && slash + 1 < rest.size(), "'", url, "' names no object (studio://BUCKET/KEY)");
  std::string path = "/api/v1/buckets/" + rest.substr(0, slash) + "/objects/";
  for (unsigned char c : rest.substr(slash + 1)) {  // the key, percent-encoded but for '/'
    if (std::isalnum(c) || std::strchr("-_.~/", c)) {
      path += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      path += hex;
    }
  }
  detail::HttpRequest request;
  request.server = server;
  request.path = path;
  request.bearer_token = token;
  detail::HttpAnswer r;
  try {
    r = detail::http_request(request);
  } catch (const Error& e) {
    KILN_FAIL("cannot read ", url, " from the studio: ", e.what());
  }
  if (r.status == 404) throw Missing(url + ": no such object in the studio's store; kiln store ls shows what is there");
  KILN_CHECK(r.status == 200, url, ": the studio answered ", r.status, " ", r.body);
  return std::move(r.body);
}

struct ArchiveReader {
  archive* a = archive_read_new();
  ~ArchiveReader() { archive_read_free(a); }
};

}  // namespace

std::pair<std::string, std::string> split_sample_name(const std::string& name) {
  const size_t base = name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

void read_shard(const std::string& tar, const std::string& where, const std::function<void(ShardSample&&)>& emit) {
  ArchiveReader r;
  archive_read_support_format_tar(r.a);
  if (archive_read_open_memory(r.a, tar.data(), tar.size()) != ARCHIVE_OK)
    KILN_FAIL(where, ": not a tar shard (", archive_error_string(r.a), ")");
  ShardSample current;
  archive_entry* entry = nullptr;
  int rc;
  while ((rc = archive_read_next_header(r.a, &entry)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    auto [key, field] = split_sample_name(archive_entry_pathname(entry));
    if (key != current.key && !current.fields.empty()) emit(std::move(current));
    if (key != current.key) current = ShardSample{key, {}};
    std::string bytes(static_cast<size_t>(std::max<la_int64_t>(0, archive_entry_size(entry))), '\0');
    la_ssize_t n = archive_read_data(r.a, bytes.data(), bytes.size());
    KILN_CHECK(n == static_cast<la_ssize_t>(bytes.size()), where, ": member ", archive_entry_pathname(entry),
               " is cut short (", n < 0 ? archive_error_string(r.a) : "truncated", "); pack the shard again");
    current.fields[field] = std::move(bytes);
  }
  KILN_CHECK(rc == ARCHIVE_EOF, where, ": damaged tar (", archive_error_string(r.a), "); pack the shard again");
  if (!current.fields.empty()) emit(std::move(current));
}

struct ShardWriter::Impl {
  std::string prefix;
  int64_t shard_bytes;
  std::function<void(const std::string&, int64_t, int64_t)> on_shard;
  archive* a = nullptr;
  std::string path;
  int64_t index = 0, samples = 0, bytes = 0;

  void open() {
    char name[32];
    std::snprintf(name, sizeof name, "-%06lld.tar", static_cast<long long>(index++));
    path = prefix + name;
    a = archive_write_new();
    archive_write_set_format_pax_restricted(a);  // ustar, with pax headers only for long names
    if (archive_write_open_filename(a, path.c_str()) != ARCHIVE_OK) {
      std::string why = archive_error_string(a);
      archive_write_free(a);
      a = nullptr;
      KILN_FAIL("cannot write the shard ", path, ": ", why);
    }
    samples = bytes = 0;
  }
  void close() {
    if (!a) return;
    const bool ok = archive_write_close(a) == ARCHIVE_OK;
    std::string why = ok ? "" : archive_error_string(a);
    archive_write_free(a);
    a = nullptr;
    KILN_CHECK(ok, "cannot finish the shard ", path, ": ", why, " (is the disk full?)");
    on_shard(path, samples, bytes);
  }
};

ShardWriter::ShardWriter(std::string prefix, int64_t shard_bytes,
                         std::function<void(const std::string&, int64_t, int64_t)> on_shard)
    : impl_(std::make_unique<Impl>()) {
  KILN_CHECK(shard_bytes > 0, "a shard size must be positive");
  impl_->prefix = std::move(prefix);
  impl_->shard_bytes = shard_bytes;
  impl_->on_shard = std::move(on_shard);
}

ShardWriter::~ShardWriter() {
  if (impl_->a) archive_write_free(impl_->a);
}

void ShardWriter::add(const std::string& key, const std::vector<std::pair<std::string, std::string>>& fields) {
  Impl& w = *impl_;
  if (!w.a) w.open();
  for (const auto& [field, bytes] : fields) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, (key + "." + field).c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_mtime(e, 0, 0);  // the same files give the same shard
    const bool ok = archive_write_header(w.a, e) == ARCHIVE_OK &&
                    archive_write_data(w.a, bytes.data(), bytes.size()) == static_cast<la_ssize_t>(bytes.size());
    archive_entry_free(e);
    KILN_CHECK(ok, "cannot write ", key, ".", field, " into the shard ", w.path, ": ", archive_error_string(w.a),
               " (is the disk full?)");
    w.bytes += static_cast<int64_t>(bytes.size()) + 1024;  // the member's header and padding, about
  }
  ++w.samples;
  if (w.bytes >= w.shard_bytes) w.close();
}

void ShardWriter::finish() { impl_->close(); }

std::vector<std::string> expand_shard_pattern(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  const size_t close = pattern.find('}', open);
  KILN_CHECK(close != std::string::npos, "shard pattern '", pattern, "' has a '{' without its '}'");
  const std::string range = pattern.substr(open + 1, close - open - 1);
  const size_t dots = range.find("..");
  KILN_CHECK(dots != std::string::npos && dots > 0 && dots + 2 < range.size(), "shard pattern '", pattern,
             "': write a range of shards as {000000..000009}");
  const std::string first = range.substr(0, dots), last = range.substr(dots + 2);
  KILN_CHECK(first.find_first_not_of("0123456789") == std::string::npos &&
                 last.find_first_not_of("0123456789") == std::string::npos && first.size() < 12 && last.size() < 12,
             "shard pattern '", pattern, "': a range is two numbers, as in {000000..000009}");
  const long long from = std::stoll(first), to = std::stoll(last);
  KILN_CHECK(from <= to && to - from < 1000000, "shard pattern '", pattern, "': the range runs backwards or is too long");
  std::vector<std::string> out;
  for (long long i = from; i <= to; ++i) {
    std::string n = std::to_string(i);
    if (n.size() < first.size()) n.insert(0, first.size() - n.size(), '0');
    for (auto& rest : expand_shard_pattern(pattern.substr(close + 1))) out.push_back(pattern.substr(0, open) + n + rest);
  }
  return out;
}

std::string fetch_shard(const std::string& url) {
  if (is_store_url(url)) return studio_get(url);
  if (!std::filesystem::exists(url)) throw Missing("no shard " + url);
  return read_text_file(url);
}

int64_t ShardIndex::total() const {
  int64_t n = 0;
  for (int64_t s : samples) n += s;
  return n;
}

ShardIndex index_shards(const std::string& pattern) {
  ShardIndex index;
  index.shards = expand_shard_pattern(pattern);
  std::string prefix = pattern.substr(0, pattern.find('{'));
  if (!prefix.empty() && prefix.back() == '-') prefix.pop_back();
  std::map<std::string, int64_t> counted;  // by the shard's file name
  try {
    json j = json::parse(fetch_shard(prefix + "-index.json"));
    for (const auto& s : j.at("shards")) counted[s.at("file").get<std::string>()] = s.at("samples").get<int64_t>();
  } catch (const Missing&) {  // no index: the shards are counted below
  } catch (const json::exception& e) {
    KILN_FAIL(prefix, "-index.json is damaged (", e.what(), "); pack the shards again");
  }
  for (const auto& url : index.shards) {
    const std::string file = url.substr(url.rfind('/') + 1);
    auto it = counted.find(file);
    int64_t n = 0;
    if (it != counted.end()) {
      n = it->second;
    } else {
      read_shard(fetch_shard(url), url, [&](ShardSample&&) { ++n; });
    }
    index.samples.push_back(n);
  }
  KILN_CHECK(index.total() > 0, "the shards ", pattern, " hold no sample");
  return index;
}

// The producer of one epoch: fetches this rank's shards (one ahead), decodes
// samples, mixes them through the shuffle buffer and queues them.
struct ShardSource::Reader {
  std::mutex mu;
  std::condition_variable changed;
  std::deque<Sample> ready;
  bool stop = false, done = false;
  std::exception_ptr error;
  std::thread thread;

  ~Reader() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    changed.notify_all();
    if (thread.joinable()) thread.join();
  }
  // false once the consumer has gone
  bool put(Sample&& s, size_t limit) {
    std::unique_lock<std::mutex> lock(mu);
    changed.wait(lock, [&] { return stop || ready.size() < limit; });
    if (stop) return false;
    ready.push_back(std::move(s));
    changed.notify_all();
    return true;
  }
};

ShardSource::ShardSource(ShardIndex index, ShardSourceOptions options)
    : index_(std::move(index)), options_(std::move(options)) {
  KILN_CHECK(options_.batch_size > 0, "batch size must be positive");
  KILN_CHECK(options_.ranks >= 1 && options_.rank >= 0 && options_.rank < options_.ranks, "rank ", options_.rank,
             " is not one of ", options_.ranks);
  KILN_CHECK(!options_.shuffle || static_cast<int64_t>(index_.shards.size()) >= options_.ranks, index_.shards.size(),
             " shard", index_.shards.size() == 1 ? "" : "s", " cannot feed ", options_.ranks,
             " ranks in training (each reads whole shards); pack with a smaller --shard-size");
}

ShardSource::~ShardSource() = default;

int64_t ShardSource::batches_per_epoch() const {
  // Training: every rank the same count, since they step together.
  // Evaluation: every ranks-th sample, each seen once.
  const int64_t samples = options_.shuffle ? index_.total() / options_.ranks
                                           : (index_.total() - options_.rank + options_.ranks - 1) / options_.ranks;
  const int64_t b = options_.batch_size;
  return options_.drop_remainder ? samples / b : (samples + b - 1) / b;
}

Sample ShardSource::decode(const ShardSample& s, Generator& gen) const {
  const std::string* image = nullptr;
  for (const char* field : {"png", "jpg", "jpeg"})
    if (auto it = s.fields.find(field); it != s.fields.end()) image = &it->second;
  auto cls = s.fields.find("cls");
  KILN_CHECK(image && cls != s.fields.end(), "sample '", s.key,
             "' needs an image (.png, .jpg or .jpeg) and a class (.cls); it has ",
             [&] {
               std::string names;
               for (const auto& [f, _] : s.fields) names += (names.empty() ? "." : ", .") + f;
               return names.empty() ? std::string("nothing") : names;
             }());
  Sample out;
  out.input = decode_image(reinterpret_cast<const uint8_t*>(image->data()), image->size(), options_.channels);
  for (const auto& t : options_.transforms) out.input = t.apply(out.input, gen);
  char* end = nullptr;
  const long long label = std::strtoll(cls->second.c_str(), &end, 10);
  KILN_CHECK(end != cls->second.c_str() && label >= 0, "sample '", s.key, "': its .cls is '", cls->second,
             "', not a class index");
  out.label = Tensor::empty({}, DType::Int64);
  *out.label.data<int64_t>() = label;
  return out;
}

Sample ShardSource::first_sample() const {
  Sample first;
  bool found = false;
  Generator gen(options_.seed);
  read_shard(fetch_shard(index_.shards[0]), index_.shards[0], [&](ShardSample&& s) {
    if (!found) first = decode(s, gen);
    found = true;
  });
  KILN_CHECK(found, index_.shards[0], " holds no sample");
  return first;
}

void ShardSource::start_epoch() {
  reader_.reset();  // the last epoch's producer stops
  ++epoch_;
  served_ = 0;
  std::vector<size_t> order(index_.shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Generator gen(mix(options_.seed, static_cast<uint64_t>(epoch_)));
  if (options_.shuffle) std::shuffle(order.begin(), order.end(), gen);
  // Training: every ranks-th shard of the epoch's order. Evaluation: all of
  // them, keeping every ranks-th sample.
  std::vector<size_t> mine;
  const size_t step = options_.shuffle ? static_cast<size_t>(options_.ranks) : 1;
  for (size_t i = options_.shuffle ? static_cast<size_t>(options_.rank) : 0; i < order.size(); i += step)
    mine.push_back(order[i]);
  const int64_t wanted = batches_per_epoch() * options_.batch_size;
  reader_ = std::make_unique<Reader>();
  Reader* r = reader_.get();
  r->thread = std::thread([this, r, mine, wanted, seed = gen.next()] {
    try {
      Generator mixing(seed);
      std::vector<Sample> buffer;
      const size_t limit = static_cast<size_t>(options_.shuffle ? std::max<int64_t>(1, options_.shuffle_buffer) : 1);
      const size_t queue = static_cast<size_t>(4 * options_.batch_size);
      int64_t produced = 0, decoded = 0, seen = 0;
      bool open = true;
      auto release_one = [&] {  // a random sample of the buffer goes to the queue
        std::swap(buffer[mixing.next() % buffer.size()], buffer.back());
        open = r->put(std::move(buffer.back()), queue);
        buffer.pop_back();
      };
      auto emit = [&](Sample&& s) {
        if (!options_.shuffle) {
          open = r->put(std::move(s), queue);
          return;
        }
        buffer.push_back(std::move(s));
        if (buffer.size() >= limit) release_one();
      };
      // Training reads the rank's shards, starting over only when they hold
      // fewer samples than the epoch's batches take; evaluation reads them once.
      auto next = std::async(std::launch::async, fetch_shard, index_.shards[mine[0]]);
      for (size_t i = 0; open && (options_.shuffle ? produced < wanted : i < mine.size()); ++i) {
        const size_t shard = mine[i % mine.size()];
        std::string tar = next.get();
        const bool more = options_.shuffle ? produced + index_.samples[shard] < wanted : i + 1 < mine.size();
        if (more) next = std::async(std::launch::async, fetch_shard, index_.shards[mine[(i + 1) % mine.size()]]);
        read_shard(tar, index_.shards[shard], [&](ShardSample&& s) {
          if (!open || (options_.shuffle && produced >= wanted)) return;
          if (!options_.shuffle && seen++ % options_.ranks != options_.rank) return;
          Generator g(mix(mix(options_.seed, static_cast<uint64_t>(epoch_)), static_cast<uint64_t>(decoded++)));
          emit(decode(s, g));
          ++produced;
        });
        if (!more) break;
      }
      while (open && !buffer.empty()) release_one();
      if (next.valid()) next.wait();
    } catch (...) {
      std::lock_guard<std::mutex> lock(r->mu);
      r->error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(r->mu);
    r->done = true;
    r->changed.notify_all();
  });
}

bool ShardSource::next(Batch& batch) {
  if (!reader_) start_epoch();
  if (served_ >= batches_per_epoch()) return false;
  std::vector<Sample> samples;
  Reader& r = *reader_;
  while (static_cast<int64_t>(samples.size()) < options_.batch_size) {
    std::unique_lock<std::mutex> lock(r.mu);
    r.changed.wait(lock, [&] { return !r.ready.empty() || r.done; });
    if (r.ready.empty()) {
      if (r.error) std::rethrow_exception(r.error);
      break;  // the shards ran out: a short last batch
    }
    samples.push_back(std::move(r.ready.front()));
    r.ready.pop_front();
    r.changed.notify_all();
  }
  if (samples.empty()) return false;
  batch = collate(samples);
  ++served_;
  return true;
}

}  // namespace kiln::data
