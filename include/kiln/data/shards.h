#pragma once
// WebDataset-style tar shards: many small files packed into a few large
// tars (`name-000000.tar`, ...), the files of one sample next to each other
// and sharing a key (`train/00042.png` and `train/00042.cls` are the fields
// png and cls of sample `train/00042`). Shards move through an object store
// as a few large transfers instead of one per file, and training streams
// them: shard by shard, never the whole set on disk.
//
//   // recipe: dataset: {shards: "studio://data/shards/fm-train-{000000..000003}.tar",
//   //                   test_shards: "studio://data/shards/fm-test-{000000..000000}.tar"}
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/pipeline.h"

namespace kiln::data {

// One sample of a shard: its key and its fields (extension -> bytes).
struct ShardSample {
  std::string key;
  std::map<std::string, std::string> fields;
};

// A member name split into key and field: the field is everything after
// the first dot of the last path component ("a/b.c/x.seg.png": key
// "a/b.c/x", field "seg.png").
std::pair<std::string, std::string> split_sample_name(const std::string& name);

// Calls `emit` for each sample of a tar held in memory, in order; members
// of one key must be adjacent (as pack_shards writes them). Throws naming
// `where` when the tar is damaged.
void read_shard(const std::string& tar, const std::string& where, const std::function<void(ShardSample&&)>& emit);

// Writes shards: pack() adds one sample's files; a shard is closed (and
// on_shard called with its path, samples and bytes) once it holds at least
// `shard_bytes`, and at finish().
class ShardWriter {
 public:
  // Shards are written to `prefix`-000000.tar, `prefix`-000001.tar, ...
  ShardWriter(std::string prefix, int64_t shard_bytes,
              std::function<void(const std::string& path, int64_t samples, int64_t bytes)> on_shard);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  // fields: (field, bytes) of one sample, written as members `key`.field.
  void add(const std::string& key, const std::vector<std::pair<std::string, std::string>>& fields);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `name-{000000..000009}.tar` as its ten names (the width of the first
// number kept); several brace groups multiply; text without braces is itself.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

// A shard's bytes: a local path, or studio://BUCKET/KEY read from the studio
// at KILN_STUDIO_URL with KILN_STUDIO_TOKEN (as a job's ranks have them).
std::string fetch_shard(const std::string& url);

// The index pack writes beside the shards (PREFIX-index.json): samples per
// shard, so that an epoch's length is known before a shard is read.
struct ShardIndex {
  std::vector<std::string> shards;  // URLs
  std::vector<int64_t> samples;     // per shard
  int64_t total() const;
};
// The pattern's shards with their sample counts: from the index when there
// is one (the pattern's text before its first brace, less a trailing '-',
// plus "-index.json"), otherwise by reading every shard once.
ShardIndex index_shards(const std::string& pattern);

// Batches of (image, class) samples streamed from shards: each sample's image
// field (png, jpg or jpeg) decoded to uint8 [H, W, channels] and put through
// `transforms`, its cls field (a decimal class index) the label. Shards are
// fetched one ahead of the one being read. With shuffle, every epoch draws a
// new shard order and mixes samples through a buffer, both from (seed,
// epoch). With several ranks, each reads every ranks-th shard of the epoch's
// order, and all stop after the same number of batches.
struct ShardSourceOptions {
  int64_t batch_size = 64;
  bool shuffle = false;
  bool drop_remainder = false;
  uint64_t seed = 0;
  int64_t rank = 0, ranks = 1;
  int channels = 1;
  int64_t shuffle_buffer = 2000;  // samples
  std::vector<Transform> transforms;
};
class ShardSource : public BatchSource {
 public:
  ShardSource(ShardIndex index, ShardSourceOptions options);
  ~ShardSource() override;
  void start_epoch() override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t batch_size() const override { return options_.batch_size; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch - 1; }
  // The first sample of the first shard after the transforms (shapes, checks).
  Sample first_sample() const;

 private:
  struct Reader;
  Sample decode(const ShardSample& s, Generator& gen) const;
  ShardIndex index_;
  ShardSourceOptions options_;
  int64_t epoch_ = -1;
  int64_t served_ = 0;  // batches this epoch
  std::unique_ptr<Reader> reader_;
};

}  // namespace kiln::data
