// einsum: Einstein summation over any number of operands, as a composition of
// registered ops (diagonals through index_select, sums, permutes, reshapes and
// batched matmuls), so it has gradients and runs in graph mode.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "kiln/functional.h"

namespace kiln {
namespace {

// An axis label: a letter's code, or kEllipsis + k for the k-th axis of the
// ellipsis counted from the right (so that ellipses broadcast right-aligned).
constexpr int kEllipsis = 256;
using Labels = std::vector<int>;

struct Term {
  Tensor t;
  Labels labels;
};

// The labels of one term ("ij", "...k", "b...ii") for a tensor of `rank` axes
// (rank < 0: the output, whose ellipsis has `ellipsis` axes).
Labels parse_term(const std::string& term, int64_t rank, int64_t ellipsis, const std::string& equation) {
  const size_t dots = term.find("...");
  int64_t letters = 0;
  for (size_t i = 0; i < term.size(); ++i) {
    if (dots != std::string::npos && i >= dots && i < dots + 3) continue;
    KILN_CHECK(std::isalpha(static_cast<unsigned char>(term[i])), "einsum: '", equation, "' has '", term[i],
               "' in a term; terms hold letters and at most one '...'");
    ++letters;
  }
  KILN_CHECK(dots == std::string::npos || term.find("...", dots + 3) == std::string::npos, "einsum: '", term,
             "' has more than one '...'");
  const int64_t e = rank < 0 ? ellipsis : rank - letters;
  KILN_CHECK(rank < 0 || (dots == std::string::npos ? e == 0 : e >= 0), "einsum: term '", term, "' of '", equation,
             "' names ", letters, " axes but its operand has ", rank);
  Labels out;
  for (size_t i = 0; i < term.size(); ++i) {
    if (dots != std::string::npos && i == dots) {
      for (int64_t k = e - 1; k >= 0; --k) out.push_back(kEllipsis + static_cast<int>(k));
      i += 2;
      continue;
    }
    out.push_back(static_cast<unsigned char>(term[i]));
  }
  return out;
}

std::vector<int64_t> positions_of(const Labels& labels, const Labels& wanted) {
  std::vector<int64_t> p;
  for (int l : wanted) p.push_back(std::find(labels.begin(), labels.end(), l) - labels.begin());
  return p;
}

bool has(const Labels& labels, int l) { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

// A label that appears twice in one term is a diagonal: the two axes become one.
void take_diagonals(Term& term) {
  for (size_t a = 0; a < term.labels.size(); ++a) {
    const auto b = std::find(term.labels.begin() + a + 1, term.labels.end(), term.labels[a]);
    if (b == term.labels.end()) continue;
    const int64_t j = b - term.labels.begin(), n = term.t.shape()[a];
    KILN_CHECK(term.t.shape()[j] == n, "einsum: the diagonal of axes of sizes ", n, " and ", term.t.shape()[j]);
    Labels rest;
    std::vector<int64_t> order;
    for (size_t d = 0; d < term.labels.size(); ++d)
      if (static_cast<int64_t>(d) != static_cast<int64_t>(a) && static_cast<int64_t>(d) != j) {
        order.push_back(static_cast<int64_t>(d));
        rest.push_back(term.labels[d]);
      }
    order.push_back(static_cast<int64_t>(a));
    order.push_back(j);
    Shape merged(term.t.shape().size() - 1);
    for (size_t d = 0; d + 2 < order.size(); ++d) merged[d] = term.t.shape()[order[d]];
    merged.back() = n * n;
    const Tensor diagonal =
        arange(n, DType::Int64, term.t.device()) * scalar_tensor(static_cast<double>(n + 1), DType::Int64);
    term.t = index_select(term.t.permute(order).reshape(merged), static_cast<int64_t>(merged.size()) - 1, diagonal);
    rest.push_back(term.labels[a]);
    term.labels = rest;
    a = static_cast<size_t>(-1);  // start over: the axes moved
  }
}

// Sums the axes whose labels are not in `keep`.
void sum_out(Term& term, const Labels& keep) {
  std::vector<int64_t> axes;
  Labels rest;
  for (size_t d = 0; d < term.labels.size(); ++d) {
    if (has(keep, term.labels[d])) rest.push_back(term.labels[d]);
    else axes.push_back(static_cast<int64_t>(d));
  }
  if (axes.empty()) return;
  term.t = sum(term.t, axes, false);
  term.labels = rest;
}

int64_t product(const std::map<int, int64_t>& size, const Labels& labels) {
  int64_t p = 1;
  for (int l : labels) p *= size.at(l);
  return p;
}

// a and b contracted over their shared labels not in `needed`; the shared
// ones in it are batch axes, the others carried to the result.
Term contract(Term a, Term b, const Labels& needed, const std::map<int, int64_t>& size) {
  Labels batch, left, shared, right;
  for (int l : a.labels) {
    if (has(b.labels, l)) (has(needed, l) ? batch : shared).push_back(l);
    else left.push_back(l);
  }
  for (int l : b.labels)
    if (!has(a.labels, l)) right.push_back(l);
  auto arrange = [&](Term& t, const Labels& first, const Labels& second, const Labels& third) {
    Labels order_labels = first;
    order_labels.insert(order_labels.end(), second.begin(), second.end());
    order_labels.insert(order_labels.end(), third.begin(), third.end());
    Shape full;
    for (int l : order_labels) full.push_back(size.at(l));
    Tensor p = t.t.permute(positions_of(t.labels, order_labels));
    if (p.shape() != full) p = p.expand(full);  // broadcast size-1 axes
    return p.contiguous().reshape({product(size, first), product(size, second), product(size, third)});
  };
  Tensor y = matmul(arrange(a, batch, left, shared), arrange(b, batch, shared, right));
  Labels labels = batch;
  labels.insert(labels.end(), left.begin(), left.end());
  labels.insert(labels.end(), right.begin(), right.end());
  Shape shape;
  for (int l : labels) shape.push_back(size.at(l));
  return {y.reshape(shape), labels};
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t at = 0;;) {
    const size_t comma = lhs.find(',', at);
    terms.push_back(lhs.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  KILN_CHECK(terms.size() == operands.size(), "einsum: '", equation, "' has ", terms.size(), " input terms but ",
             operands.size(), " operands were given");
  std::vector<Term> inputs;
  int64_t ellipsis = 0;
  std::map<int, int64_t> size;
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    Term t{operands[i], parse_term(terms[i], operands[i].dim(), 0, equation)};
    for (size_t d = 0; d < t.labels.size(); ++d) {
      const int l = t.labels[d];
      const int64_t s = t.t.shape()[d];
      if (l >= kEllipsis) ellipsis = std::max<int64_t>(ellipsis, l - kEllipsis + 1);
      auto [it, fresh] = size.emplace(l, s);
      if (!fresh && it->second != s) {
        KILN_CHECK(it->second == 1 || s == 1, "einsum: '", equation, "' gives one index the sizes ", it->second,
                   " and ", s);
        it->second = std::max(it->second, s);
      }
      ++count[l];
    }
    inputs.push_back(std::move(t));
  }
  Labels output;
  if (arrow != std::string::npos) {
    output = parse_term(eq.substr(arrow + 2), -1, ellipsis, equation);
    for (int l : output)
      KILN_CHECK(size.count(l), "einsum: the output of '", equation, "' names an index no input has");
  } else {  // implicit: the ellipsis, then the letters that appear once, in order
    for (int64_t k = ellipsis - 1; k >= 0; --k) output.push_back(kEllipsis + static_cast<int>(k));
    for (const auto& [l, c] : count)
      if (l < kEllipsis && c == 1) output.push_back(l);
  }
  // Diagonals first, then each label no other term and not the output reads is summed away.
  for (Term& t : inputs) take_diagonals(t);
  auto needed_beyond = [&](size_t i) {
    Labels needed = output;
    for (size_t j = 0; j < inputs.size(); ++j)
      if (j != i) needed.insert(needed.end(), inputs[j].labels.begin(), inputs[j].labels.end());
    return needed;
  };
  for (size_t i = 0; i < inputs.size(); ++i) sum_out(inputs[i], needed_beyond(i));
  Term acc = inputs[0];
  for (size_t i = 1; i < inputs.size(); ++i) {
    Labels needed = output;
    for (size_t j = i + 1; j < inputs.size(); ++j) needed.insert(needed.end(), inputs[j].labels.begin(), inputs[j].labels.end());
    acc = contract(acc, inputs[i], needed, size);
  }
  sum_out(acc, output);
  Shape full;
  for (int l : output) full.push_back(size.at(l));
  Tensor y = acc.t.permute(positions_of(acc.labels, output));
  return y.shape() == full ? y : y.expand(full);
}

}  // namespace kiln
