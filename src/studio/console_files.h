#pragma once
// The web console's built files (console/, built with Vite), served by the
// studio at "/": the files as they are, index.html for any other path (the
// console routes in the browser), never a file outside the folder.
#include <string>

#include "kiln/serve.h"
#include "serve/http_server.h"

namespace kiln::studio {

void serve_console(const std::string& dir, const serve::HttpRequest& req, serve::HttpResponse& res);

}  // namespace kiln::studio
