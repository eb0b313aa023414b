// DecideAsync for asio users: the completion runs on the given executor.
#pragma once

#include <asio/post.hpp>
#include <utility>

#include "limiter/client/client.h"

namespace limiter::client {

template <class Executor, class Handler>
void AsyncDecide(Client& client, const Request& request, Executor executor, Handler handler) {
  client.DecideAsync(request, [executor, handler = std::move(handler)](Decision d) mutable {
    asio::post(executor, [handler = std::move(handler), d = std::move(d)]() mutable {
      handler(std::move(d));
    });
  });
}

}  // namespace limiter::client
