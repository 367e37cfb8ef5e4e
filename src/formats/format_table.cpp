// Placeholder translation unit; the formats table is being written (issue 2).
namespace lowbit {}
