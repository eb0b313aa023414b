// The admin port (server/admin_port.h) in this process on 127.0.0.1:0, against raw sockets:
// routes, a handler's bad answers, bounded requests (413, 431, 400), 100-continue, keep-alive,
// the deadlines, Stop, Start's errors, the counters, BearerToken and AdminSource. The hostile
// crowds are in admin_port_hostile_test.cc. Waits are bounded loops; nothing asserts how
// fast anything was.
#include "server/admin_port.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "test/integration/admin_port_harness.h"

namespace limiter {
namespace {

using namespace std::chrono_literals;
using testing::AdminPortFixture;
using testing::CapOptions;
using testing::HttpResponse;
using testing::kProbe;
using testing::RawHttpClient;
using testing::Served;
using testing::Slow;
using testing::TestOptions;
using testing::WaitUntil;

using AdminPortTest = AdminPortFixture;

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

TEST_F(AdminPortTest, ServesGetAndPostRoutesWithTheRequestAsSent) {
  StartPort();
  RawHttpClient c = Connect();
  ASSERT_TRUE(c.Send(kProbe));
  std::optional<HttpResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  EXPECT_EQ(r->header("content-type"), "text/plain");
  EXPECT_EQ(r->header("connection"), "keep-alive");

  ASSERT_TRUE(
      c.Send("POST /echo?verbose=1&x=2 HTTP/1.1\r\nHost: node\r\n"
             "Authorization: Bearer s3cret\r\nContent-Length: 5\r\n\r\nhello"));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body,
            "method=POST\npath=/echo\nquery=verbose=1&x=2\nauthorization=Bearer s3cret\n"
            "peer=" +
                c.local() + "\nbody=hello");
  EXPECT_EQ(port_->responses(200), 2u);
}

TEST_F(AdminPortTest, ListensOnIPv6AndNamesAnIPv6PeerInBrackets) {
  AdminPortOptions options = TestOptions();
  options.listen = "[::1]:0";
  StartPort(options);
  ASSERT_EQ(port_->address().substr(0, 6), "[::1]:");
  RawHttpClient c = Connect("::1");
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  const std::optional<HttpResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("\npeer=" + c.local() + "\n"), std::string::npos) << r->body;
  EXPECT_EQ(c.local().substr(0, 6), "[::1]:");
}

TEST_F(AdminPortTest, AnswersUnknownPaths404WrongMethods405WithAllowAndHeadLikeGet) {
  StartPort(TestOptions(), [](AdminPort& p) {
    p.Get("/both", [](const AdminRequest&) { return AdminResponse{200, "text/plain", "g", {}}; });
    p.Post("/both", [](const AdminRequest&) { return AdminResponse{202, "text/plain", "p", {}}; });
  });
  HttpResponse r = Exchange("GET /nope HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "no such path: /nope\n");
  EXPECT_EQ(Exchange("GET /healthz?probe=1 HTTP/1.1\r\n\r\n").status, 200);  // query split off

  r = Exchange("POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "GET, HEAD");
  r = Exchange("GET /echo HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "POST");
  r = Exchange("DELETE /both HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("allow"), "GET, HEAD, POST");
  EXPECT_EQ(Exchange("POST /both HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status, 202);

  // HEAD: the GET route's header, no body; the next response on the connection follows it.
  RawHttpClient c = Connect();
  ASSERT_TRUE(c.Send("HEAD /healthz HTTP/1.1\r\n\r\nGET /both HTTP/1.1\r\n\r\n"));
  std::optional<HttpResponse> head = c.Read(20s, /*head=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->header("content-length"), "3");
  std::optional<HttpResponse> next = c.Read();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->body, "g");
  EXPECT_EQ(port_->responses(404), 1u);
  EXPECT_EQ(port_->responses(405), 3u);
}

TEST_F(AdminPortTest, AHandlersInvalidOrThrowingAnswerBecomesA500AndThePortServesOn) {
  StartPort(TestOptions(), [](AdminPort& p) {
    p.Get("/split", [](const AdminRequest&) {
      return AdminResponse{200, "text/plain", "x", {{"X-A", "1\r\nSet-Cookie: evil"}}};
    });
    p.Get("/status", [](const AdminRequest&) { return AdminResponse{99, "text/plain", "", {}}; });
    p.Get("/length", [](const AdminRequest&) {
      return AdminResponse{200, "text/plain", "x", {{"Content-Length", "9"}}};
    });
    p.Get("/throws",
          [](const AdminRequest&) -> AdminResponse { throw std::runtime_error("render failed"); });
    p.Get("/auth", [](const AdminRequest&) {
      return AdminResponse{401, "text/plain", "no\n", {{"WWW-Authenticate", "Bearer"}}};
    });
  });
  for (const char* path : {"/split", "/status", "/length"}) {
    const HttpResponse r = Exchange("GET " + std::string(path) + " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(r.status, 500) << path;
    EXPECT_EQ(r.body, "the handler of " + std::string(path) + " gave an invalid response\n");
    EXPECT_EQ(r.header("set-cookie"), "") << path;
  }
  const HttpResponse thrown = Exchange("GET /throws HTTP/1.1\r\n\r\n");
  EXPECT_EQ(thrown.status, 500);
  EXPECT_EQ(thrown.body, "the handler of /throws failed: render failed\n");
  const HttpResponse auth = Exchange("GET /auth HTTP/1.1\r\n\r\n");
  EXPECT_EQ(auth.status, 401);
  EXPECT_EQ(auth.header("www-authenticate"), "Bearer");
  EXPECT_EQ(Exchange(kProbe).status, 200);
}

TEST_F(AdminPortTest, ABodyAnnounced8GiBGets413AndIsNeverBuffered) {
  StartPort();
  ASSERT_EQ(Exchange(kProbe).status, 200);
  const int64_t rss_before = ResidentBytes();
  RawHttpClient c = Connect();
  ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: node\r\nContent-Length: 8589934592\r\n\r\n"));
  // Streams up to 400 MiB, reading what comes back, until the port has ended its side (end of
  // file) and the stream no longer goes through (a reset: the port closed the connection).
  constexpr int64_t kStream = int64_t{400} << 20;
  const std::string chunk(64 * 1024, 'x');
  int64_t sent = 0;
  bool send_failed = false;
  bool eof = false;
  std::string back;
  for (const auto until = std::chrono::steady_clock::now() + 60s;
       !(eof && (send_failed || sent >= kStream)) && std::chrono::steady_clock::now() < until;) {
    const bool sending = !send_failed && sent < kStream;
    pollfd p{c.fd(), static_cast<short>((eof ? 0 : POLLIN) | (sending ? POLLOUT : 0)), 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (!eof && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      char buffer[4096];
      const ssize_t n = ::recv(c.fd(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) back.append(buffer, static_cast<size_t>(n));
      eof = n == 0 || (n < 0 && errno != EAGAIN);
    }
    if (sending && (p.revents & (POLLOUT | POLLHUP | POLLERR))) {
      const ssize_t n = ::send(c.fd(), chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += n;
      send_failed = n < 0 && errno != EAGAIN;
    }
  }
  EXPECT_TRUE(eof) << "the port did not end its side";
  EXPECT_TRUE(send_failed) << "the port did not close the connection";
  EXPECT_EQ(back.substr(0, 13), "HTTP/1.1 413 ") << back;
  EXPECT_NE(back.find("request body over 4096 bytes"), std::string::npos) << back;
  EXPECT_LT(sent, kStream) << "the port took the whole stream";
  std::cout << "sent " << sent << " bytes before the close\n";
  const int64_t grown = ResidentBytes() - rss_before;
  EXPECT_LT(grown, int64_t{6} << 20) << "RSS grew by " << grown << " bytes";
  std::cout << "RSS grew by " << grown << " bytes\n";
  EXPECT_EQ(port_->responses(413), 1u);
  EXPECT_EQ(Exchange(kProbe).status, 200);
}

TEST_F(AdminPortTest, BodiesOverTheBoundGet413AnnouncedOrChunked) {
  StartPort();
  const std::string kPost = "POST /echo HTTP/1.1\r\nHost: node\r\n";
  ExpectRefused(kPost + "Content-Length: 4097\r\n\r\n", 413, "one byte over");
  HttpResponse r = Exchange(kPost + "Content-Length: 4096\r\n\r\n" + std::string(4096, 'b'));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("body=" + std::string(4096, 'b')), std::string::npos);

  const std::string chunked = kPost + "Transfer-Encoding: chunked\r\n\r\n";
  const std::string kib(1024, 'c');
  std::string over = chunked;
  for (int i = 0; i < 5; ++i) over += "400\r\n" + kib + "\r\n";
  ExpectRefused(over + "0\r\n\r\n", 413, "5 chunks of 1 KiB");
  ExpectRefused(chunked + "ffffffff\r\n", 413, "a 4 GiB chunk announced");
  ExpectRefused(chunked + "fffffffffffffffffffff\r\n", 400, "a chunk size past 64 bits");
  // A chunk size line that never ends gets the header's bound.
  ExpectRefused(chunked + "1;" + std::string(9000, 'e'), 400, "a 9000-byte chunk extension");

  r = Exchange(chunked + "3\r\nabc\r\n2;note=1\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("body=abcde"), std::string::npos) << r.body;
  EXPECT_EQ(port_->responses(413), 3u);
}

TEST_F(AdminPortTest, HeadersOver8KiBGet431WithoutWaitingForTheirEnd) {
  StartPort();
  const std::string big(9000, 'h');
  ExpectRefused("GET /healthz HTTP/1.1\r\nX-Big: " + big + "\r\n\r\n", 431, "a 9000-byte field");
  ExpectRefused("GET /healthz HTTP/1.1\r\nX-Big: " + big, 431, "a header still going");
  ExpectRefused("GET /" + big + " HTTP/1.1\r\n\r\n", 431, "a 9000-byte target");
  std::string fields = "GET /healthz HTTP/1.1\r\n";
  for (int i = 0; i < 2100; ++i) fields += "a:\r\n";
  ExpectRefused(fields + "\r\n", 431, "2100 empty fields");
  EXPECT_EQ(port_->responses(431), 4u);
  EXPECT_EQ(Exchange(kProbe).status, 200);
}

TEST_F(AdminPortTest, MalformedRequestsGet400NamingTheFault) {
  StartPort();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"GARBAGE\r\n\r\n", "no target"},
      {"GET /healthz HTTP/2.0\r\n\r\n", "HTTP/2.0"},
      {"GET /healthz HTTP/1.1\r\nContent-Length: abc\r\n\r\n", "a length that is no number"},
      {"GET /healthz HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "two lengths"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "a coding other than chunked"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "chunked, not last"},
      {"POST /echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
       "a length and chunked"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
       "chunked and a length"},
      {"GET /healthz HTTP/1.1\nHost: n\n\n", "bare line feeds"},
      {"GET  /healthz HTTP/1.1\r\n\r\n", "two spaces"},
      {"GET /healthz HTTP/1.1\r\nNo colon here\r\n\r\n", "a field without a colon"},
      {"GET /he\x01lz HTTP/1.1\r\n\r\n", "a control byte in the target"},
      {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + "\r\n\r\n",
       "a TLS client hello"},
      {"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "a chunk size not hex"},
  };
  for (const auto& [request, why] : cases) {
    ExpectRefused(request, 400, why);
  }
  const HttpResponse r = Exchange("GET /healthz HTTP/2.0\r\n\r\n");
  EXPECT_EQ(r.body, "malformed request: bad version (in its header)\n");
  EXPECT_EQ(Exchange(kProbe).status, 200);
}

TEST_F(AdminPortTest, AnExpect100ContinueGetsTheGoAheadBeforeItsBody) {
  StartPort();
  RawHttpClient c = Connect();
  ASSERT_TRUE(
      c.Send("POST /echo HTTP/1.1\r\nHost: node\r\nExpect: 100-continue\r\n"
             "Content-Length: 5\r\n\r\n"));
  std::optional<HttpResponse> interim = c.Read();
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.Send("hello"));
  std::optional<HttpResponse> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("body=hello"), std::string::npos);
}

TEST_F(AdminPortTest, KeepAliveServesSeveralRequestsPipelinedOrNotUpToItsLimit) {
  AdminPortOptions options = TestOptions();
  options.max_requests_per_connection = 5;
  StartPort(options);
  RawHttpClient c = Connect();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.Send(kProbe));
    std::optional<HttpResponse> r = c.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("connection"), "keep-alive");
  }
  // Three at once; the last of five allowed says close, and the connection ends.
  ASSERT_TRUE(c.Send(std::string(kProbe) + "POST /echo HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi" +
                     std::string(kProbe)));
  for (int i = 0; i < 3; ++i) {
    std::optional<HttpResponse> r = c.Read();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->header("connection"), i < 2 ? "keep-alive" : "close") << i;
    if (i == 1) {
      EXPECT_NE(r->body.find("body=hi"), std::string::npos);
    }
  }
  EXPECT_TRUE(c.WaitClosed());

  // HTTP/1.0 closes unless asked to keep alive; HTTP/1.1 when asked to close.
  RawHttpClient old = Connect();
  ASSERT_TRUE(old.Send("GET /healthz HTTP/1.0\r\n\r\n"));
  std::optional<HttpResponse> r = old.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "ok\n");
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(old.WaitClosed());
  RawHttpClient kept = Connect();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(kept.Send("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    r = kept.Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->header("connection"), "keep-alive");
  }
  RawHttpClient closing = Connect();
  ASSERT_TRUE(closing.Send("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"));
  r = closing.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(closing.WaitClosed());
}

TEST_F(AdminPortTest, ARequestNotWholeWithinTheRequestTimeoutIsClosedAndCounted) {
  AdminPortOptions options = TestOptions();
  options.request_timeout = 300ms;
  StartPort(options);
  RawHttpClient silent = Connect();  // sends nothing
  RawHttpClient half = Connect();
  ASSERT_TRUE(half.Send("GET /healthz HTTP/1.1\r\nHo"));
  EXPECT_TRUE(silent.WaitClosed());
  EXPECT_TRUE(half.WaitClosed());
  EXPECT_EQ(silent.unread(), "");  // closed without a word
  EXPECT_EQ(half.unread(), "");
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().request_timeouts == 2; }));
  // The count goes down just after the close the clients saw.
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().open == 0; }));
}

TEST_F(AdminPortTest, AKeptAliveConnectionIdlePastTheIdleTimeoutIsClosedAndCounted) {
  AdminPortOptions options = TestOptions();
  options.idle_timeout = 300ms;
  StartPort(options);
  RawHttpClient idle = Connect();
  ASSERT_TRUE(idle.Send(kProbe));
  ASSERT_TRUE(idle.Read());
  EXPECT_TRUE(idle.WaitClosed());
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().idle_timeouts == 1; }));
}

TEST_F(AdminPortTest, AResponseNotTakenWithinTheWriteTimeoutEndsItsConnection) {
  AdminPortOptions options = TestOptions();
  options.write_timeout = 300ms;
  StartPort(options, [](AdminPort& p) {
    p.Get("/big", [](const AdminRequest&) {
      return AdminResponse{200, "text/plain", std::string(32 << 20, 'z'), {}};
    });
  });
  // 32 MiB asked for and never read: more than loopback's buffers hold.
  RawHttpClient stuck = Connect();
  const int small = 4096;
  ::setsockopt(stuck.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  ASSERT_TRUE(stuck.Send("GET /big HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().write_timeouts == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().open == 0; }));
  EXPECT_EQ(Exchange(kProbe).status, 200);
}

TEST_F(AdminPortTest, StopWithConnectionsOpenReturnsAndClosesThem) {
  AdminPortOptions options = CapOptions(64, 64);
  options.write_timeout = 120s;
  StartPort(options, [](AdminPort& p) {
    p.Get("/big", [](const AdminRequest&) {
      return AdminResponse{200, "text/plain", std::string(32 << 20, 'z'), {}};
    });
  });
  std::vector<RawHttpClient> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(Slow(port_number_, "127.0.0.1"));
  for (int i = 0; i < 5; ++i) clients.push_back(Served(port_number_, "127.0.0.1"));
  RawHttpClient stuck = Connect();  // a response in flight, never read
  ASSERT_TRUE(stuck.Send("GET /big HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().open == 11; }));
  std::future<void> stopped = std::async(std::launch::async, [this] { port_->Stop(); });
  ASSERT_EQ(stopped.wait_for(60s), std::future_status::ready) << "Stop hung";
  for (RawHttpClient& c : clients) EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(port_->stats().open, 0);
  EXPECT_FALSE(RawHttpClient(port_number_).ok()) << "still listening";
  port_->Stop();  // again: nothing
}

TEST_F(AdminPortTest, StopFromAHandlerEndsThePortAndTheNextStopJoins) {
  StartPort(TestOptions(), [](AdminPort& p) {
    p.Post("/stop", [&p](const AdminRequest&) {
      p.Stop();
      return AdminResponse{202, "text/plain", "stopping\n", {}};
    });
  });
  RawHttpClient c = Connect();
  ASSERT_TRUE(c.Send("POST /stop HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_TRUE(WaitUntil([&] { return !RawHttpClient(port_number_).ok(); }));
  std::future<void> stopped = std::async(std::launch::async, [this] { port_.reset(); });
  ASSERT_EQ(stopped.wait_for(60s), std::future_status::ready) << "the destructor hung";
}

TEST_F(AdminPortTest, StartRejectsBadOptionsAndAddressesNamingThem) {
  const auto start_error = [](AdminPortOptions o) {
    AdminPort port(std::move(o));
    const Status started = port.Start();
    return started.ok() ? std::string("(started)") : started.error();
  };
  AdminPortOptions o = TestOptions();
  o.listen = "nonsense";
  EXPECT_EQ(start_error(o),
            "cannot listen on nonsense (admin port): expected HOST:PORT or [V6]:PORT");
  o.listen = "127.0.0.1:99999";
  EXPECT_EQ(start_error(o),
            "cannot listen on 127.0.0.1:99999 (admin port): expected HOST:PORT or [V6]:PORT");
  o.listen = "192.0.2.1:0";  // TEST-NET-1: no address of this machine
  EXPECT_EQ(start_error(o),
            "cannot listen on 192.0.2.1:0 (admin port): Cannot assign requested address");
  StartPort();
  o.listen = port_->address();
  EXPECT_EQ(start_error(o),
            "cannot listen on " + port_->address() + " (admin port): Address already in use");
  EXPECT_EQ(port_->Start().error(), "admin port: started already");

  const std::vector<std::pair<std::function<void(AdminPortOptions&)>, std::string>> bad = {
      {[](AdminPortOptions& x) { x.max_connections = 0; },
       "max_connections must be at least 1, got 0"},
      {[](AdminPortOptions& x) { x.max_per_source = -1; },
       "max_per_source must be at least 1, got -1"},
      {[](AdminPortOptions& x) { x.max_header_bytes = 100; },
       "max_header_bytes must be at least 256, got 100"},
      {[](AdminPortOptions& x) { x.max_header_bytes = int64_t{1} << 31; },
       "max_header_bytes must be at most 1 GiB, got 2147483648"},
      {[](AdminPortOptions& x) { x.max_body_bytes = -1; },
       "max_body_bytes must be at least 0, got -1"},
      {[](AdminPortOptions& x) { x.max_requests_per_connection = 0; },
       "max_requests_per_connection must be at least 1, got 0"},
      {[](AdminPortOptions& x) { x.request_timeout = 0ms; },
       "request_timeout (ms) must be at least 1, got 0"},
      {[](AdminPortOptions& x) { x.idle_timeout = -5ms; },
       "idle_timeout (ms) must be at least 1, got -5"},
      {[](AdminPortOptions& x) { x.write_timeout = 0ms; },
       "write_timeout (ms) must be at least 1, got 0"},
  };
  for (const auto& [change, message] : bad) {
    AdminPortOptions x = TestOptions();
    change(x);
    EXPECT_EQ(start_error(x), "admin port: " + message);
  }
}

TEST(AdminPortDeathTest, ARouteAddedAfterStartIsABugThatStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        AdminPort port(TestOptions());
        (void)port.Start();
        port.Get("/late", [](const AdminRequest&) { return AdminResponse{}; });
      },
      "AdminPort::Get\\(/late\\) after Start");
}

TEST_F(AdminPortTest, RendersItsCountersWithBoundedLabels) {
  StartPort(CapOptions(64, 2));
  RawHttpClient held1 = Served(port_number_, "127.0.0.2");
  RawHttpClient held2 = Served(port_number_, "127.0.0.2");
  EXPECT_EQ(Exchange("GET /nope HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(Exchange("POST /echo HTTP/1.1\r\nContent-Length: 99999\r\n\r\n").status, 413);
  RawHttpClient refused = Connect("127.0.0.2");
  EXPECT_TRUE(refused.WaitClosed());
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().refused_per_source == 1; }));
  const std::string page = port_->RenderMetrics();
  for (const char* line : {
           "limiter_admin_requests_total{code=\"200\"} 2\n",
           "limiter_admin_requests_total{code=\"404\"} 1\n",
           "limiter_admin_requests_total{code=\"413\"} 1\n",
           "limiter_admin_connections_refused_total{reason=\"per_source\"} 1\n",
           "limiter_admin_connections_refused_total{reason=\"cap\"} 0\n",
           "limiter_admin_slow_clients_closed_total 0\n",
           "limiter_admin_timeouts_total{phase=\"request\"} 0\n",
           "limiter_admin_timeouts_total{phase=\"write\"} 0\n",
           "limiter_admin_timeouts_total{phase=\"idle\"} 0\n",
           "limiter_admin_connections_accepted_total 4\n",
           "# TYPE limiter_admin_connections_open gauge\n",
       }) {
    EXPECT_NE(page.find(line), std::string::npos) << line << " in\n" << page;
  }
  EXPECT_NE(page.find("limiter_admin_connections_open "), std::string::npos);
}

TEST(AdminPortHelpers, BearerTokenTakesTheTokenOfABearerAuthorizationOnly) {
  EXPECT_EQ(BearerToken("Bearer abc.DEF-123"), "abc.DEF-123");
  EXPECT_EQ(BearerToken("bearer abc"), "abc");
  EXPECT_EQ(BearerToken("BEARER\tabc"), "abc");
  EXPECT_EQ(BearerToken("  Bearer    abc  "), "abc");
  EXPECT_EQ(BearerToken("Bearer"), std::nullopt);
  EXPECT_EQ(BearerToken("Bearer   "), std::nullopt);
  EXPECT_EQ(BearerToken("Bearerabc"), std::nullopt);
  EXPECT_EQ(BearerToken("Basic YWxhZGRpbjpvcGVuc2VzYW1l"), std::nullopt);
  EXPECT_EQ(BearerToken("Bearer a b"), std::nullopt);
  EXPECT_EQ(BearerToken(""), std::nullopt);
}

TEST(AdminPortHelpers, AdminSourceIsTheIPv4AddressOrTheIPv6Slash64) {
  EXPECT_EQ(AdminSource("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(AdminSource("::ffff:10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(AdminSource("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
  EXPECT_EQ(AdminSource("2001:db8:1:2::1"), AdminSource("2001:db8:1:2:ffff::9"));
  EXPECT_NE(AdminSource("2001:db8:1:2::1"), AdminSource("2001:db8:1:3::1"));
  EXPECT_EQ(AdminSource("::1"), "::/64");
  EXPECT_EQ(AdminSource("localhost"), std::nullopt);
  EXPECT_EQ(AdminSource(""), std::nullopt);
}

}  // namespace
}  // namespace limiter
