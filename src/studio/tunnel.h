#pragma once
// A connection handed over by the HTTP transport (HttpResponse::takeover),
// joined to a server on this machine: the request's head goes there, then
// bytes flow both ways until either side closes. What a WebSocket through
// the studio (a notebook's kernel) needs.
#include <atomic>
#include <string>
#include <string_view>

namespace kiln::studio {

// head: the request as the server should get it (its head, ending in a
// blank line); early: what the client sent after it. Returns when either
// side closes, or when `stopping` turns true.
void tunnel(int client_fd, std::string_view early, int port, const std::string& head, const std::atomic<bool>& stopping);

}  // namespace kiln::studio
