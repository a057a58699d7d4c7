#pragma once
// `kiln store pack` and `unpack`: a folder of many small files moved through
// the store as a few WebDataset-style tar shards (kiln/data/shards.h).
#include <cstdint>
#include <string>

namespace kiln::cli {

// Packs every file under `src` into shards of about `shard_bytes` uploaded
// as DST-000000.tar, ... (DST: studio://BUCKET/PREFIX/NAME), with
// DST-index.json listing them; `jobs` shards upload at once. With
// labels_from_folders, SRC holds a folder per class (sorted names give the
// indices) and each sample gets a cls field with its class.
void pack_to_store(const std::string& server, const std::string& token, const std::string& src, const std::string& dst,
                   int64_t shard_bytes, int jobs, bool labels_from_folders);
// Downloads the shards SRC-NNNNNN.tar (`jobs` at once) and writes their
// members back as files under `dst`.
void unpack_from_store(const std::string& server, const std::string& token, const std::string& src,
                       const std::string& dst, int jobs);

// "256MB", "64MiB", "1G", "4096": bytes.
int64_t parse_size(const std::string& text);

}  // namespace kiln::cli
