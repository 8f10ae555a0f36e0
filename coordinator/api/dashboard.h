// The dashboard page GET /dashboard serves: one self-contained HTML file
// (coordinator/api/dashboard.html, embedded at build time) that draws
// GET /v1/cluster every 2 s: the nodes, a timeline of recent steps and a
// heat map of expert use. It sends the bearer token taken from the URL
// fragment (/dashboard#token=...) or typed into its form, and keeps it in
// the tab only.
#ifndef COLIBRI_COORDINATOR_API_DASHBOARD_H_
#define COLIBRI_COORDINATOR_API_DASHBOARD_H_

namespace colibri::coordinator {

// NUL-terminated UTF-8 HTML.
extern const char kDashboardHtml[];

}  // namespace colibri::coordinator

#endif  // COLIBRI_COORDINATOR_API_DASHBOARD_H_
