#pragma once
// Writes a zip archive of named entries (stored, as torch.save writes them)
// with libarchive: the tests and fuzzers make .pt files with it.
#include <archive.h>
#include <archive_entry.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

inline bool write_zip(const std::string& path, const std::vector<std::pair<std::string, std::string>>& entries) {
  archive* a = archive_write_new();
  archive_write_set_format_zip(a);
  archive_write_set_options(a, "zip:compression=store");
  bool ok = archive_write_open_filename(a, path.c_str()) == ARCHIVE_OK;
  for (const auto& [name, data] : entries) {
    if (!ok) break;
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    ok = archive_write_header(a, e) == ARCHIVE_OK &&
         (data.empty() || archive_write_data(a, data.data(), data.size()) == static_cast<la_ssize_t>(data.size()));
    archive_entry_free(e);
  }
  ok = archive_write_close(a) == ARCHIVE_OK && ok;
  archive_write_free(a);
  return ok;
}

}  // namespace kiln::testing
