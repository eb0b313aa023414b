#include <iostream>

#include "client/ctl/ctl.h"

int main(int argc, char** argv) { return limiter::ctl::Run(argc, argv, std::cout, std::cerr); }
