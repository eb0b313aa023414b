#include "bench/report_chart.h"

#include <fstream>
#include <memory>

#include "common/subprocess.h"

namespace limiter::bench {

Status WriteChart(const std::string& dir, const std::vector<ChartRow>& rows,
                  const std::string& title) {
  const std::string tsv = dir + "/per_second.tsv";
  {
    std::ofstream f(tsv);
    f << "# t_s\tdecided_per_s\tstore_ops_per_s\tp99_us\n";
    for (const ChartRow& s : rows) {
      f << s.t << '\t' << s.decided << '\t' << s.store_ops << '\t' << s.p99_us << '\n';
    }
    if (!f) return Error{"cannot write " + tsv};
  }
  const std::string gp = dir + "/chart.gp";
  {
    std::ofstream f(gp);
    f << "set terminal png size 900,450\n"
      << "set output '" << dir << "/chart.png'\n"
      << "set title '" << title << "'\n"
      << "set xlabel 'seconds'\nset ylabel 'decisions/s'\nset y2label 'p99 added latency (us)'\n"
      << "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\nset key bottom "
         "right\n"
      << "plot '" << tsv << "' using 1:2 with linespoints title 'decisions/s' axes x1y1, \\\n"
      << "     '" << tsv << "' using 1:3 with linespoints title 'store ops/s' axes x1y1, \\\n"
      << "     '" << tsv << "' using 1:4 with linespoints title 'p99 (us)' axes x1y2\n";
    if (!f) return Error{"cannot write " + gp};
  }
  Result<std::unique_ptr<Subprocess>> gnuplot = Subprocess::Start({"gnuplot", gp});
  if (!gnuplot) return Error{"cannot run gnuplot: " + gnuplot.error()};
  const std::optional<int> status = (*gnuplot)->Wait(30'000);
  if (!status || *status != 0) return Error{"gnuplot failed on " + gp};
  return Status::Ok();
}

}  // namespace limiter::bench
