#pragma once
// A folder and a prefix of the store kept alike: a job's output and logs
// copied up while it runs, its inputs copied down before; a notebook's
// working folder restored on start and saved while it runs and on stop.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "studio/object_store.h"

namespace kiln::studio {

// What each file was (size, time) when last copied up, by path: a sync
// reads and hashes only what changed since.
using SyncedFiles = std::map<std::string, std::pair<uintmax_t, std::filesystem::file_time_type>>;

// Copies the folder's files under bucket/prefix (a prefix ends with '/', or
// is empty), skipping those unchanged since `synced` or already there.
void copy_folder_to_store(ObjectStore& store, const std::string& dir, const std::string& bucket,
                          const std::string& prefix, SyncedFiles& synced);

// Copies one object named exactly, or every object under the prefix (keys
// relative to it), into dir. `what` names the source in errors.
void copy_store_to_folder(ObjectStore& store, const std::string& bucket, const std::string& prefix,
                          const std::string& dir, const std::string& what);

}  // namespace kiln::studio
