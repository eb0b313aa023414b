// placeholder: replaced in this change
#include <gtest/gtest.h>
