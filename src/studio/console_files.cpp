#include "studio/console_files.h"

#include <filesystem>

#include "studio/object_store.h"

namespace kiln::studio {
namespace {

const char* content_type(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

}  // namespace

void serve_console(const std::string& dir, const serve::HttpRequest& req, serve::HttpResponse& res) {
  namespace fs = std::filesystem;
  if (req.method != "GET" && req.method != "HEAD") {
    serve::set_error(res, 405, req.method + " is not allowed on the console's files (GET)");
    return;
  }
  const fs::path index = fs::path(dir) / "index.html";
  if (dir.empty() || !fs::exists(index)) {
    res.status = 404;
    res.content_type = "text/plain; charset=utf-8";
    res.body = "The web console is not built here (" + (dir.empty() ? std::string("no --console-dir") : dir) +
               "). Build it with the project (cmake --build: npm and Node.js needed), or use the REST API under "
               "/api/v1 and the kiln CLI.\n";
    return;
  }
  // A path with '..' or a hidden part never reaches the disk: such requests get the console itself.
  fs::path file = index;
  const std::string relative = req.path.substr(1);
  bool plain = !relative.empty();
  for (const auto& part : fs::path(relative)) plain = plain && !part.empty() && part.string()[0] != '.';
  if (plain && fs::is_regular_file(fs::path(dir) / relative)) file = fs::path(dir) / relative;
  res.status = 200;
  res.content_type = content_type(file.string());
  res.body = read_text(file.string());
  // Vite names assets by their content: they never change; index.html does.
  res.headers.emplace_back("Cache-Control",
                           relative.rfind("assets/", 0) == 0 ? "public, max-age=31536000, immutable" : "no-cache");
  res.headers.emplace_back("X-Content-Type-Options", "nosniff");
}

}  // namespace kiln::studio
